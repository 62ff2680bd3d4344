"""The machine's ``QUARRY_*`` variables, read in one place: :class:`Environment` and
:func:`environment`. Below :mod:`quarry.core.settings` (a run's settings) and
:mod:`quarry.core.storeurl`, which both read them; imports nothing above ``core``."""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from quarry.core.errors import ConfigError

DEFAULT_DB = ".quarry"
PREFIX = "QUARRY_"
BOOL_WORDS = "true/false, 1/0, yes/no, on/off"


class Environment(BaseSettings):
    """The ``QUARRY_*`` variables of a machine rather than of a run: where caches and stores live,
    how long a store keeps generations and versions, limits of the readers, the API and the
    workers. Read by :func:`environment` (the one place that reads them), checked like
    :class:`Settings` (a value that cannot be read is a :class:`ConfigError` naming the variable),
    and listed in docs/settings.md."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
    )

    db: str = DEFAULT_DB  # the default store
    store_cache: str = ""  # local folders of stores on object storage ("" = ~/.cache/quarry/stores)
    cache_dir: str = ""  # built ONNX models and archive listings ("" = ~/.cache/quarry)
    keep_generations: int = Field(2, ge=1)  # committed generations a store keeps (quarry rollback)
    keep_versions_hours: float = Field(24.0, ge=0)  # LanceDB versions quarry maintain keeps
    reindex_share: float = Field(0.2, ge=0, le=1)  # quarry maintain rebuilds an index past this share
    remote_check_seconds: float = Field(0.0, ge=0)  # a reader of a remote store reads CURRENT at most this often
    lease_seconds: float = Field(60.0, gt=0)  # the writer lease on object storage
    vector_search: str = "auto"  # how readers search vectors: auto, exact, ivf, binary
    ivf_min_rows: int = Field(20_000, ge=1)  # chunks from which a commit builds IVF
    merge_min_rows: int = Field(4_096, ge=1)  # catalog layers / index segments smaller count as this big
    rebase_share: float = Field(0.25, ge=0)  # layers past this share of the base's rows: a new base
    max_layers: int = Field(16, ge=2)  # most catalog layers (index segments) a generation reads
    dup_threshold: float = Field(0.8, ge=0.5, le=1.0)  # estimated Jaccard from which two documents are near-duplicates
    corpus_signals: bool = True  # compute duplicate signatures, PII, language and quality per chunk (docs/corpus.md)
    boilerplate: str = Field(
        "keep", pattern="^(keep|strip)$"
    )  # strip: boilerplate lines leave BM25 text and embeddings
    compact_fragments: int = Field(64, ge=0)  # LanceDB fragments past which a commit compacts
    prune_versions: int = Field(100, ge=0)  # LanceDB versions past which a commit prunes old ones
    fts_memory_mb: int = Field(1024, ge=64)  # DuckDB's memory while it builds the full-text tables (match_bm25)
    fts_threads: int = Field(2, ge=1)  # DuckDB's threads while it builds them (at the lowest priority)
    key_index_rows: int = Field(20_000, ge=1)  # LanceDB rows from which a commit keeps chunk_id and text_hash indexes
    max_file_mb: float = Field(256.0, ge=0)  # larger files are failures, not read (0: no limit)
    max_archive_mb: float = Field(4096.0, ge=0)  # what an archive may unpack to (0: no limit)
    object_reads: int = Field(8, ge=1)  # objects of a root on object storage a batch reads at once
    object_spill_mb: float = Field(16.0, ge=0)  # an object larger than this is read into a temporary file
    ocr_engine: str = ""  # rapidocr (default when installed) or tesseract
    soffice: str = ""  # the LibreOffice program ("" = soffice or libreoffice on the PATH)
    keys_file: str = ""  # API keys outside the store
    keys_check_seconds: float | None = Field(None, ge=0)  # how often a server re-reads its keys
    api_rate_limit: int = Field(600, ge=0)  # requests per minute per API key (0: unlimited)
    prefect_startup_timeout: float = Field(120.0, gt=0)  # seconds to wait for a private Prefect server
    # seconds an interactive run's private Prefect server stays for the next run of the store (0: none;
    # unset: 300 when quarry runs at a terminal, else 0)
    prefect_linger: float | None = Field(None, ge=0)
    log_level: str = ""  # quarry's and Prefect's log level (the CLI's --log-level)
    log_format: str = Field("text", pattern="^(text|json)$")  # text, or json: one object a line (--log-format)
    api_metrics: bool = True  # quarry api counts requests and serves /metrics (off: neither; denials are still audited)
    metrics_file: str = ""  # every run writes its Prometheus metrics here (node_exporter's textfile collector)


_env_cache: tuple[tuple[tuple[str, str], ...], Environment] | None = None


def environment() -> Environment:
    """The machine's ``QUARRY_*`` variables (:class:`Environment`), read again when they change."""
    global _env_cache
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(PREFIX)))
    cached = _env_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        value = Environment()
    except ValidationError as exc:
        raise ConfigError(describe_error(exc, {}, Environment)) from None
    _env_cache = (key, value)
    return value


def describe_error(exc: ValidationError, given: dict[str, Any], model: type[BaseSettings]) -> str:
    """One line for the first error: where the value came from, what it was, what is accepted."""
    error = exc.errors(include_url=False)[0]
    loc = error.get("loc") or ()
    field = loc[0] if loc and isinstance(loc[0], str) else None
    if field is None:  # a check between fields: its message says it all
        return str(error["msg"]).removeprefix("Value error, ")
    if field not in model.model_fields:  # an alias such as OPENAI_API_KEY
        field = next(
            (
                name
                for name, f in model.model_fields.items()
                if f.validation_alias and field in getattr(f.validation_alias, "choices", ())
            ),
            field,
        )
    source = field if field in given else f"{PREFIX}{field.upper()}"
    value = error.get("input")
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "value_error":
        message = str(error["msg"]).removeprefix("Value error, ")
        if message.startswith("is not a known "):  # a registry's name: say which value
            return f"{source}={value!r} {message}"
        return f"{source}: {message}"
    if kind == "literal_error":
        choices = ", ".join(a.strip("'") for a in str(ctx.get("expected", "")).replace(" or ", ", ").split(", "))
        return f"{source}={value!r} is not a known {field}; choose one of {choices}"
    if kind == "bool_parsing":
        return f"{source}={value!r} is not a boolean; use one of {BOOL_WORDS}"
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return f"{source}={value!r} is not an integer"
    if kind in ("float_parsing", "float_type"):
        return f"{source}={value!r} is not a number"
    if kind == "greater_than":
        return f"{source} must be more than {ctx.get('gt')}, got {value}"
    if kind == "greater_than_equal":
        return f"{field} must be at least {ctx.get('ge')}, got {value}"
    if kind == "less_than_equal":
        return f"{field} must be at most {ctx.get('le')}, got {value}"
    return f"{source}={value!r}: {error['msg']}"
