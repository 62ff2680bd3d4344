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

from quarry.core.errors import ConfigError
from quarry.core.models import HEADER_FIELDS

DEFAULT_DB = ".quarry"
DEFAULT_LLM_MODEL = "gpt-4o-mini"  # used only when no model is named and no base URL points elsewhere
# How the LLM is asked for JSON (quarry/ingest/llm/prompts.py builds each); "auto" tries them in order.
RESPONSE_FORMATS = ("json_schema", "json_object_schema", "json_object", "none")


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
    min_section: int = 400  # the semantic sectioner never cuts a section shorter than this
    semantic_percentile: int = 90  # cut where neighbour distance exceeds this percentile
    # header lines, in order; () = the context writer's default (rules: title, section;
    # llm: title, summary, section, plus section_summary/chunk_context when those are on)
    header_fields: tuple[str, ...] = ()
    # LLM (any OpenAI-compatible chat endpoint) for --sectioner llm / --context llm
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key: str = field(default="", repr=False)
    llm_concurrency: int = 8  # requests in flight at once, over all files of a batch
    llm_rate_limit: int = 0  # requests per minute; 0 = unlimited
    llm_timeout: int = 120  # seconds per request
    llm_response_format: str = "auto"  # auto | json_schema | json_object_schema | json_object | none
    llm_window_chars: int = 20000  # sectioning window: characters of numbered lines per request
    llm_input_tokens: int = 4000  # context writer input budget (about 4 characters a token)
    llm_section_summaries: bool = False  # one call per section for a one-sentence summary
    llm_chunk_context: bool = False  # one call per chunk (contextual retrieval); costly
    # embedding
    embed_backend: str = "onnx-int8"  # the fastest local backend that passes the SciFact quality guard
    embed_model: str = ""  # "" = the backend's default model
    embed_dim: int = 0  # 0 = the model's native dimension
    embed_budget: int = 8192  # tokens per embedding batch (local backends)
    embed_concurrency: int = 4  # openai backend: requests in flight at once
    embed_rate_limit: int = 0  # openai backend: requests per minute; 0 = unlimited
    embed_token_rate_limit: int = 0  # openai backend: estimated tokens per minute; 0 = unlimited
    embed_max_inputs: int = 2048  # openai backend: inputs per request (the provider's limit)
    embed_request_tokens: int = 300_000  # openai backend: tokens per request (the provider's limit)
    openai_timeout: int = 60  # seconds per embedding request
    openai_attempts: int = 6  # attempts per request, retries included (429, 5xx, timeouts only)
    openai_base_url: str = ""
    openai_api_key: str = field(default="", repr=False)
    # run
    parse_workers: int = 0  # 0 = one per CPU
    parse_timeout: int = 120  # seconds per file
    ocr: bool = True  # OCR images and PDF pages without a text layer (QUARRY_OCR=0 turns it off)

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
        if not values["llm_api_key"]:
            values["llm_api_key"] = os.environ.get("OPENAI_API_KEY", "")
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid setting.

        ``embed_backend``, ``sectioner`` and ``context`` name registered components; their
        registries live with the implementations, above this layer, and
        :func:`quarry.ingest.check_settings` checks them (the CLI and the index flow call it).
        """
        if self.chunk_size < 100:
            raise ConfigError(f"chunk_size must be at least 100 characters, got {self.chunk_size}")
        if not 0 <= self.chunk_overlap < self.chunk_size // 2:
            raise ConfigError(f"chunk_overlap must be between 0 and half of chunk_size, got {self.chunk_overlap}")
        if self.embed_backend == "openai" and not self.openai_api_key and not self.openai_base_url:
            raise ConfigError(
                "the openai backend needs QUARRY_OPENAI_API_KEY (or OPENAI_API_KEY) or QUARRY_OPENAI_BASE_URL"
            )
        for name in ("embed_concurrency", "embed_max_inputs", "embed_request_tokens", "openai_timeout",
                     "openai_attempts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        allowed = (*HEADER_FIELDS, "none")
        unknown = [f for f in self.header_fields if f not in allowed]
        if unknown:
            raise ConfigError(f"unknown header field {unknown[0]!r}; choose from {', '.join(allowed)}")
        if not 0 < self.semantic_percentile < 100:
            raise ConfigError(f"semantic_percentile must be between 1 and 99, got {self.semantic_percentile}")
        if self.min_section < 0 or self.min_section * 2 > self.max_section:
            raise ConfigError(f"min_section must be between 0 and half of max_section, got {self.min_section}")
        if self.uses_llm:
            asked = " and ".join(f"--{k} llm" for k, v in (("sectioner", self.sectioner), ("context", self.context))
                                 if v == "llm") or "llm_chunk_context"
            if not self.llm_base_url and not self.llm_api_key:
                raise ConfigError(
                    f"{asked} needs an OpenAI-compatible endpoint: set QUARRY_LLM_API_KEY (or OPENAI_API_KEY, "
                    "or --llm-api-key) for the hosted API, or QUARRY_LLM_BASE_URL (--llm-base-url) for a local server"
                )
            if self.llm_concurrency < 1:
                raise ConfigError(f"llm_concurrency must be at least 1, got {self.llm_concurrency}")
            if self.llm_window_chars < 1000:
                raise ConfigError(f"llm_window_chars must be at least 1000, got {self.llm_window_chars}")
            if self.llm_input_tokens < 100:
                raise ConfigError(f"llm_input_tokens must be at least 100, got {self.llm_input_tokens}")
            if self.llm_response_format not in ("auto", *RESPONSE_FORMATS):
                raise ConfigError(f"unknown llm_response_format {self.llm_response_format!r}; choose one of "
                                  f"auto, {', '.join(RESPONSE_FORMATS)}")

    @property
    def uses_llm(self) -> bool:
        """Whether indexing with these settings calls the LLM endpoint."""
        return self.sectioner == "llm" or self.context == "llm" or self.llm_chunk_context

    @property
    def llm_model_name(self) -> str:
        """The chat model asked for, or the hosted default."""
        return self.llm_model or DEFAULT_LLM_MODEL

    def public_dict(self) -> dict:
        """The settings without secrets, for logs and the runs table."""
        d = asdict(self)
        d["openai_api_key"] = "***" if self.openai_api_key else ""
        d["llm_api_key"] = "***" if self.llm_api_key else ""
        return d


def parse_workers(settings: Settings) -> int:
    return settings.parse_workers or max(1, os.cpu_count() or 1)


def store_path(db: str | os.PathLike | None) -> Path:
    return Path(db or default_db()).expanduser().absolute()
