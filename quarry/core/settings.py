"""Settings: one frozen pydantic-settings model, filled from keyword arguments, then ``QUARRY_*``
environment variables, then a ``.env`` file in the working directory, then defaults.

pydantic-settings does the reading and the per-field checks (types, choices, bounds); a value it
cannot read is a :class:`ConfigError` naming the variable (or keyword) and what it accepts, so
``QUARRY_LLM_SECTION_SUMMARIES=ture`` stops a run instead of quietly meaning False. The checks
between fields stay in :meth:`Settings._check_combination`. API keys fall back to
``OPENAI_API_KEY`` (and the OpenAI base URL to ``OPENAI_BASE_URL``), never appear in ``repr`` and
are masked by :meth:`Settings.public_dict`.

Every field that shapes the index contents takes part in ``content_fingerprint``
(quarry/ingest/process.py), which is stored with the index so a later run can tell what changed.

The fields are quarry's own settings. A component adds its own where it registers
(:mod:`quarry.core.options`): :meth:`Settings.option` reads one, :meth:`Settings.from_env` takes
them as keywords and checks those of the chosen components, :meth:`Settings.public_dict` masks
their secrets, and :meth:`Settings.fingerprint_options` feeds the content fingerprint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AliasChoices, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from quarry.core.environment import PREFIX, describe_error, environment
from quarry.core.errors import ConfigError, UsageError
from quarry.core.models import HEADER_FIELDS as HEADER_LINES
from quarry.core.options import Option, dotenv_values
from quarry.core.storeurl import is_url, local_dir

# How the LLM is asked for JSON (quarry/ingest/llm/prompts.py builds each); "auto" tries them in order.
ResponseFormat = Literal["json_schema", "json_object_schema", "json_object", "none"]
HEADER_FIELDS: tuple[str, ...] = (*HEADER_LINES, "none")  # the header lines (quarry/core/models.py), or none
RESPONSE_FORMATS: tuple[str, ...] = get_args(ResponseFormat)
# Where the batches of a run execute (quarry/flows/runners.py): threads of the flow's process (the
# default), a local process pool, a Dask cluster (local, or $QUARRY_DASK_ADDRESS) or Ray.
Runner = Literal["threads", "processes", "dask", "ray"]
RUNNERS: tuple[str, ...] = get_args(Runner)
DEFAULT_LLM_MODEL = "gpt-4o-mini"  # used only when no model is named and no base URL points elsewhere

# comma-separated lists in the environment ("*.md,*.txt"), not JSON
_Names = Annotated[tuple[str, ...], NoDecode]


def default_db() -> str:
    """The store directory: ``$QUARRY_DB`` or ``./.quarry``."""
    return environment().db


def _secret(name: str, fallback: str) -> Any:
    """A key read from ``QUARRY_<NAME>``, else ``fallback``; never shown by ``repr``."""
    return Field(default="", repr=False, validation_alias=AliasChoices(f"{PREFIX}{name.upper()}", fallback))


class Settings(BaseSettings):
    """How quarry indexes. Environment variable names are ``QUARRY_<FIELD>`` upper-cased."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        populate_by_name=True,
        validate_default=False,
    )

    # discovery
    include: _Names = ()  # glob patterns; empty means every supported file
    exclude: _Names = ()
    # the deletion guard (quarry/ingest/guard.py): a run that would delete more than this share of
    # a root's documents, and more than free_deletes of them, stops unless allow_deletes
    allow_deletes: bool = False
    max_delete_share: float = Field(0.5, ge=0, le=1)
    free_deletes: int = Field(5, ge=0)
    # sectioning and chunking
    sectioner: str = "structure"  # a name of the SECTIONERS registry (quarry/core/registry.py)
    context: str = "rules"  # a name of the CONTEXT_WRITERS registry
    chunk_size: int = Field(800, ge=100)  # characters
    chunk_overlap: int = Field(0, ge=0)  # characters, less than half of chunk_size
    min_chunk: int = 200  # a tail shorter than this merges into its neighbour
    max_section: int = 4000  # unstructured text becomes sections of about this size
    min_section: int = Field(400, ge=0)  # the semantic sectioner never cuts a section shorter than this
    semantic_percentile: int = Field(90, ge=1, le=99)  # cut where neighbour distance exceeds this percentile
    # header lines, in order; () = the context writer's default (rules: title, section;
    # llm: title, summary, section, plus section_summary/chunk_context when those are on)
    header_fields: _Names = ()
    # LLM (any OpenAI-compatible chat endpoint) for --sectioner llm / --context llm / --rerank llm
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key: str = _secret("llm_api_key", "OPENAI_API_KEY")
    llm_concurrency: int = Field(8, ge=1)  # requests in flight at once, over all files of a batch
    llm_rate_limit: int = Field(0, ge=0)  # requests per minute; 0 = unlimited
    llm_timeout: int = Field(120, ge=1)  # seconds per request
    llm_response_format: Literal["auto", ResponseFormat] = "auto"
    llm_window_chars: int = Field(20000, ge=1000)  # sectioning window: characters of numbered lines per request
    llm_input_tokens: int = Field(4000, ge=100)  # context writer input budget (about 4 characters a token)
    llm_section_summaries: bool = False  # one call per section for a one-sentence summary
    llm_chunk_context: bool = False  # one call per chunk (contextual retrieval); costly
    # answers (quarry ask, /v1/answer): the chat model ("" = llm_model) and the evidence per prompt
    answer_model: str = ""
    answer_context_tokens: int = Field(3000, ge=50)
    # embedding
    embed_backend: str = (
        "onnx-int8"  # an EMBEDDERS name; the fastest local backend that passes the SciFact quality guard
    )
    embed_model: str = ""  # "" = the backend's default model
    embed_dim: int = Field(0, ge=0)  # 0 = the model's native dimension
    embed_budget: int = Field(8192, ge=1)  # tokens per embedding batch (local backends)
    embed_concurrency: int = Field(4, ge=1)  # openai backend: requests in flight at once
    embed_rate_limit: int = Field(0, ge=0)  # openai backend: requests per minute; 0 = unlimited
    embed_token_rate_limit: int = Field(0, ge=0)  # openai backend: estimated tokens per minute; 0 = unlimited
    embed_max_inputs: int = Field(2048, ge=1)  # openai backend: inputs per request (the provider's limit)
    embed_request_tokens: int = Field(300_000, ge=1)  # openai backend: tokens per request (the provider's limit)
    openai_timeout: int = Field(60, ge=1)  # seconds per embedding request
    openai_attempts: int = Field(6, ge=1)  # attempts per request, retries included (429, 5xx, timeouts only)
    openai_base_url: str = Field("", validation_alias=AliasChoices("QUARRY_OPENAI_BASE_URL", "OPENAI_BASE_URL"))
    openai_api_key: str = _secret("openai_api_key", "OPENAI_API_KEY")
    # run
    parse_workers: int = Field(0, ge=0)  # 0 = one per CPU
    parse_timeout: int = Field(120, ge=1)  # CPU seconds a file's parse may use (quarry/ingest/process.py)
    ocr: bool = True  # OCR images and PDF pages without a text layer (QUARRY_OCR=0 turns it off)
    rehash: bool = False  # read every file's bytes each run, not trusting an unchanged size and mtime (--full does too)
    duckdb_fts: bool = True  # DuckDB's full-text tables for match_bm25 in SQL, built on demand (docs/export.md)
    # task runner of the parse/section/chunk and embed batches (quarry/flows/runners.py)
    runner: Runner = "threads"
    workers: int = Field(
        0, ge=0
    )  # processes/dask/ray: worker processes (0 = one per CPU); threads: batches per stage (0 = 1)
    dask_address: str = ""  # an existing Dask scheduler (tcp://host:8786); "" = a LocalCluster for the run
    ray_address: str = ""  # an existing Ray cluster (ray://host:10001, "auto"); "" = a local Ray for the run
    embed_threads: int = Field(0, ge=0)  # threads of a local embedding model (onnx); 0 = one per CPU
    # document permissions (quarry/ingest/acl.py): "" keeps each root's remembered source; not in
    # content_fingerprint, since a change re-parses nothing
    acl: Literal["", "none", "posix", "rules"] = ""
    acl_rules: str = ""  # a YAML rules file; implies acl "rules"

    # components' own options (quarry.core.options): given as keywords, and those of the chosen
    # components as from_env read them (a settings object does not change with the environment)
    _given: dict[str, Any] = PrivateAttr(default_factory=dict)
    _resolved: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("include", "exclude", "header_fields", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @field_validator("include", "exclude")
    @classmethod
    def _valid_globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from quarry.core.paths import check_patterns

        try:
            return check_patterns(value)
        except UsageError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("embed_backend", "sectioner", "context")
    @classmethod
    def _registered(cls, value: str, info: ValidationInfo) -> str:
        """A name the component's registry knows: quarry's own or a plugin's."""
        from quarry.core.registry import CONTEXT_WRITERS, EMBEDDERS, SECTIONERS

        assert info.field_name is not None  # a field's validator
        registry = {"embed_backend": EMBEDDERS, "sectioner": SECTIONERS, "context": CONTEXT_WRITERS}[info.field_name]
        if value not in registry:
            raise ValueError(f"is not a known {registry.kind}; choose one of {', '.join(registry.names())}")
        return value

    @field_validator("header_fields")
    @classmethod
    def _known_header_fields(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [f for f in value if f not in HEADER_FIELDS]
        if unknown:
            raise ValueError(f"unknown header field {unknown[0]!r}; choose from {', '.join(HEADER_FIELDS)}")
        return value

    @model_validator(mode="after")
    def _check_combination(self) -> Settings:
        """The checks that involve more than one field, with the messages users see."""
        if self.chunk_overlap >= self.chunk_size // 2:
            raise ValueError(f"chunk_overlap must be between 0 and half of chunk_size, got {self.chunk_overlap}")
        if self.min_section * 2 > self.max_section:
            raise ValueError(f"min_section must be between 0 and half of max_section, got {self.min_section}")
        if self.embed_backend == "openai" and not self.openai_api_key and not self.openai_base_url:
            raise ValueError(
                "the openai backend needs QUARRY_OPENAI_API_KEY (or OPENAI_API_KEY) or QUARRY_OPENAI_BASE_URL"
            )
        if self.uses_llm and not self.llm_base_url and not self.llm_api_key:
            asked = (
                " and ".join(
                    f"--{k} llm" for k, v in (("sectioner", self.sectioner), ("context", self.context)) if v == "llm"
                )
                or "llm_chunk_context"
            )
            raise ValueError(
                f"{asked} needs an OpenAI-compatible endpoint: set QUARRY_LLM_API_KEY (or OPENAI_API_KEY, "
                "or --llm-api-key) for the hosted API, or QUARRY_LLM_BASE_URL (--llm-base-url) for a local server"
            )
        return self

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Build settings: explicit ``overrides`` win over ``QUARRY_*`` variables, then ``.env``, then
        defaults. ``None`` overrides count as not given. Raises :class:`ConfigError` naming the
        first invalid setting."""
        given = {k: v for k, v in overrides.items() if v is not None}
        extra = {k: given.pop(k) for k in sorted(set(given) - set(cls.model_fields))}
        if extra:
            from quarry.core.registry import declared_option

            unknown = [k for k in extra if declared_option(k) is None]
            if unknown:
                raise ConfigError(f"unknown setting {unknown[0]!r}")
        # a keyword for a field read under other names (the keys) goes in under its first name,
        # or the environment's OPENAI_API_KEY would win over an explicit openai_api_key=
        for name in list(given):
            alias = cls.model_fields[name].validation_alias
            if isinstance(alias, AliasChoices):
                first = alias.choices[0]
                assert isinstance(first, str)  # _secret's choices are variable names, not AliasPaths
                given[first] = given.pop(name)
        try:
            settings = cls(**given)
        except ValidationError as exc:
            raise ConfigError(describe_error(exc, given, Settings)) from None
        settings._given = extra
        resolved = {}
        for registry, name in settings.components():
            resolved.update(settings.options_of(registry, name))  # checked now, not mid-run
        settings._resolved = resolved
        return settings

    def components(self) -> list[tuple[Any, str]]:
        """The components these settings choose: ``(registry, name)`` of the embedding backend,
        the sectioner and the context writer."""
        from quarry.core.registry import CONTEXT_WRITERS, EMBEDDERS, SECTIONERS

        return [(EMBEDDERS, self.embed_backend), (SECTIONERS, self.sectioner), (CONTEXT_WRITERS, self.context)]

    def options_of(self, registry: Any, name: str) -> dict[str, Any]:
        """The checked values of the options component ``name`` of ``registry`` declared;
        :class:`ConfigError` naming the variable when one is missing or cannot be read."""
        owner = f"{registry.kind} {name!r}"
        environ, dotenv = os.environ, dotenv_values()
        out = {}
        for option in registry.options(name):
            if option.name in type(self).model_fields:
                raise ConfigError(f"{owner} declares option {option.name!r}, which is one of quarry's own settings")
            if option.name in self._resolved:
                out[option.name] = self._resolved[option.name]
            else:
                out[option.name] = option.resolve(self._given, environ, dotenv, owner)
        return out

    def option(self, name: str) -> Any:
        """The value of a component's option ``name`` (a keyword of :meth:`from_env`, else
        ``QUARRY_<NAME>``, its fallbacks, ``.env``, its default); :class:`ConfigError` when no
        component declares it, or it is required and unset."""
        from quarry.core.registry import declared_option

        found = declared_option(name)
        if found is None:
            raise ConfigError(f"no component declares the option {name!r}")
        option, owner = found
        if name in self._resolved:
            return self._resolved[name]
        return option.resolve(self._given, os.environ, dotenv_values(), owner)

    def _chosen_options(self) -> list[tuple[Option, Any]]:
        out: list[tuple[Option, Any]] = []
        for registry, name in self.components():
            values = self.options_of(registry, name)
            out.extend((option, values[option.name]) for option in registry.options(name))
        return out

    def fingerprint_options(self) -> dict[str, Any]:
        """The chosen components' options that shape the index (``fingerprint=True``)."""
        return {o.name: v for o, v in self._chosen_options() if o.fingerprint}

    def option_key(self, registry: Any, name: str) -> tuple[tuple[str, Any], ...]:
        """Every option value of one component, secrets as digests: what a cached client is keyed by."""
        import hashlib

        values = self.options_of(registry, name)
        return tuple(
            (o.name, hashlib.sha256(str(values[o.name]).encode()).hexdigest() if o.secret else values[o.name])
            for o in registry.options(name)
        )

    @property
    def uses_llm(self) -> bool:
        """Whether indexing with these settings calls the LLM endpoint."""
        return self.sectioner == "llm" or self.context == "llm" or self.llm_chunk_context

    @property
    def llm_model_name(self) -> str:
        """The chat model asked for, or the hosted default."""
        return self.llm_model or DEFAULT_LLM_MODEL

    def public_dict(self) -> dict[str, Any]:
        """The settings without secrets, for logs and the runs table."""
        d = self.model_dump()
        d["openai_api_key"] = "***" if self.openai_api_key else ""
        d["llm_api_key"] = "***" if self.llm_api_key else ""
        try:
            chosen = self._chosen_options()
        except ConfigError:  # settings built without from_env's checks: the row says nothing of them
            chosen = []
        if chosen:  # only when a chosen component declares any: older rows keep their shape
            d["options"] = {o.name: ("***" if v else "") if o.secret else v for o, v in chosen}
        return d


def parse_workers(settings: Settings) -> int:
    return settings.parse_workers or max(1, os.cpu_count() or 1)


def store_path(db: str | os.PathLike[str] | None) -> Path:
    """The store directory of ``db``; a store URL (``s3://bucket/prefix``) maps to its local folder
    (:mod:`quarry.core.storeurl`)."""
    db = db or default_db()
    if is_url(db):
        return local_dir(db)
    return Path(db).expanduser().absolute()
