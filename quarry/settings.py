"""Settings: one dataclass, filled from keyword arguments, then environment, then defaults.

Every field that shapes the index contents takes part in :meth:`Settings.fingerprint`, which
is stored with the index so a later run can tell what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from quarry.errors import ConfigError

DEFAULT_DB = ".quarry"
EMBED_BACKENDS = ("torch", "onnx", "onnx-int8", "openai", "hash")
SECTIONERS = ("structure",)
CONTEXT_WRITERS = ("rules",)


def default_db() -> str:
    """The store directory: ``$QUARRY_DB`` or ``./.quarry``."""
    return os.environ.get("QUARRY_DB") or DEFAULT_DB


def _env(name: str, default):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError as exc:
            raise ConfigError(f"{name}={raw!r} is not an integer") from exc
    if isinstance(default, tuple):
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    return raw


@dataclass(frozen=True)
class Settings:
    """How quarry indexes. Environment variable names are ``QUARRY_<FIELD>`` upper-cased."""

    # discovery
    include: tuple[str, ...] = ()  # glob patterns; empty means every supported file
    exclude: tuple[str, ...] = ()
    # sectioning and chunking
    sectioner: str = "structure"
    context: str = "rules"
    chunk_size: int = 800  # characters
    chunk_overlap: int = 0  # characters
    min_chunk: int = 200  # a tail shorter than this merges into its neighbour
    max_section: int = 4000  # unstructured text becomes sections of about this size
    # embedding
    embed_backend: str = "torch"
    embed_model: str = ""  # "" = the backend's default model
    embed_dim: int = 0  # 0 = the model's native dimension
    embed_budget: int = 8192  # tokens per embedding batch
    openai_base_url: str = ""
    openai_api_key: str = field(default="", repr=False)
    # run
    parse_workers: int = 0  # 0 = one per CPU
    parse_timeout: int = 120  # seconds per file

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        """Build settings: explicit ``overrides`` win over ``QUARRY_*`` variables over defaults."""
        values = {}
        for f in fields(cls):
            if overrides.get(f.name) is not None:
                values[f.name] = overrides[f.name]
            else:
                values[f.name] = _env(f"QUARRY_{f.name.upper()}", f.default)
        if not values["openai_api_key"]:
            values["openai_api_key"] = os.environ.get("OPENAI_API_KEY", "")
        if not values["openai_base_url"]:
            values["openai_base_url"] = os.environ.get("OPENAI_BASE_URL", "")
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid setting."""
        if self.embed_backend not in EMBED_BACKENDS:
            raise ConfigError(
                f"unknown embedding backend {self.embed_backend!r}; choose one of {', '.join(EMBED_BACKENDS)}"
            )
        if self.sectioner not in SECTIONERS:
            raise ConfigError(f"unknown sectioner {self.sectioner!r}; choose one of {', '.join(SECTIONERS)}")
        if self.context not in CONTEXT_WRITERS:
            raise ConfigError(f"unknown context writer {self.context!r}; choose one of {', '.join(CONTEXT_WRITERS)}")
        if self.chunk_size < 100:
            raise ConfigError(f"chunk_size must be at least 100 characters, got {self.chunk_size}")
        if not 0 <= self.chunk_overlap < self.chunk_size // 2:
            raise ConfigError(f"chunk_overlap must be between 0 and half of chunk_size, got {self.chunk_overlap}")
        if self.embed_backend == "openai" and not self.openai_api_key and not self.openai_base_url:
            raise ConfigError(
                "the openai backend needs QUARRY_OPENAI_API_KEY (or OPENAI_API_KEY) or QUARRY_OPENAI_BASE_URL"
            )

    def content_fingerprint(self) -> str:
        """Hash of the settings that shape sections and chunks (not the vectors)."""
        keys = ("sectioner", "context", "chunk_size", "chunk_overlap", "min_chunk", "max_section")
        blob = json.dumps({k: getattr(self, k) for k in keys}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def public_dict(self) -> dict:
        """The settings without secrets, for logs and the runs table."""
        d = asdict(self)
        d["openai_api_key"] = "***" if self.openai_api_key else ""
        return d


def parse_workers(settings: Settings) -> int:
    return settings.parse_workers or max(1, os.cpu_count() or 1)


def store_path(db: str | os.PathLike | None) -> Path:
    return Path(db or default_db()).expanduser().absolute()
