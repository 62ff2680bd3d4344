"""Log lines for people (``text``) or for a log pipeline (``json``: ``--log-format json``,
``$QUARRY_LOG_FORMAT``): one JSON object a line with ``time`` (UTC, ISO 8601), ``level``, ``logger``,
``message``, and where known ``run_id``, ``stage``, ``path`` and ``trace_id`` (the OpenTelemetry
trace in progress).

The run id and stage come from :func:`bind` (the index flow binds its run id), from a record's
``extra=`` (``run_id``, ``stage``, ``path``) or from Prefect's task-run logger (the task's name is
the stage). Every line goes through :func:`scrub`: API tokens keep only their key id, and the
values of the environment's secret variables never appear. Nothing quarry logs at info level
holds document text.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["FORMATS", "JsonFormatter", "bind", "configure", "prefect_settings_path", "scrub", "uvicorn_config"]

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# the default is read-only: bind() always sets a new mapping, never mutates the one it holds
_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "quarry_log_context", default=MappingProxyType({})
)
_TOKEN = re.compile(r"\b(qk_[0-9a-f]{12}_)[A-Za-z0-9_-]{20,}")
_SECRET_NAME = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL|CONNECTION_STRING|SAS)", re.IGNORECASE)
_PUBLIC_NAMES = {"QUARRY_KEYS_FILE", "QUARRY_KEYS_CHECK_SECONDS", "AWS_ACCESS_KEY_ID"}


@contextlib.contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (``run_id``, ``stage``, ``path``) to every record logged inside the block."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


# values of components' secret options (quarry.core.options), whatever their variables are called
_declared: set[str] = set()


def add_secret(value: str) -> None:
    """Mask ``value`` in every log line and scrubbed message from now on (a secret option's value)."""
    if value and len(value) >= 6:
        _declared.add(value)


def _secrets() -> list[str]:
    named = [
        v for k, v in os.environ.items() if v and len(v) >= 6 and _SECRET_NAME.search(k) and k not in _PUBLIC_NAMES
    ]
    return [*named, *_declared]


def scrub(text: str) -> str:
    """``text`` without API token secrets (``qk_<id>_***``) or the values of secret variables."""
    text = _TOKEN.sub(r"\1***", text)
    for secret in sorted(_secrets(), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object a line (see the module docstring)."""

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Literal["%", "{", "$"] = "%",
        validate: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(fmt, datefmt, style, validate)

    def format(self, record: logging.LogRecord) -> str:
        from quarry.core.tracing import current_trace_id

        bound = _context.get()
        out = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        run_id = getattr(record, "run_id", None) or bound.get("run_id")
        stage = getattr(record, "stage", None) or bound.get("stage") or getattr(record, "task_name", None)
        path = getattr(record, "path", None) or bound.get("path")
        trace_id = current_trace_id()
        for key, value in (("run_id", run_id), ("stage", stage), ("path", path), ("trace_id", trace_id)):
            if value is not None:
                out[key] = str(value)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return scrub(json.dumps(out, ensure_ascii=False))


class TextFormatter(logging.Formatter):
    """The usual text line, scrubbed like the JSON one."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


def prefect_settings_path() -> str:
    """Prefect's logging configuration with JSON console lines (``PREFECT_LOGGING_SETTINGS_PATH``)."""
    return str(resources.files("quarry.core") / "prefect-logging-json.yml")


def configure(level: str | None = None, fmt: str = "text") -> None:
    """Send quarry's (and Prefect's) log records at ``level`` and above to stderr as ``fmt`` lines.

    Prefect reads its configuration when first imported, which commands do lazily after this: the
    JSON format reaches it through ``PREFECT_LOGGING_SETTINGS_PATH`` (inherited by flow runs)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; choose text or json")
    if level:
        os.environ["PREFECT_LOGGING_LEVEL"] = level.upper()
    if fmt == "json":
        os.environ["PREFECT_LOGGING_SETTINGS_PATH"] = prefect_settings_path()
        os.environ["QUARRY_LOG_FORMAT"] = "json"  # flow runs of `quarry serve` and API workers inherit it
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    if level:
        logging.getLogger("quarry").setLevel(level.upper())


def uvicorn_config(fmt: str) -> dict[str, Any] | None:
    """uvicorn's ``log_config`` for ``fmt`` (None: uvicorn's own text lines)."""
    if fmt != "json":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "quarry.core.logs.JsonFormatter"}},
        "handlers": {"default": handler},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "quarry": {"handlers": ["default"], "level": "INFO", "propagate": False},
        },
    }
