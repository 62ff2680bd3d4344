"""The exceptions quarry raises. Each docstring is the message's meaning."""

from __future__ import annotations

from typing import Any


class QuarryError(Exception):
    """Base class: an error quarry reports as one line, without a traceback."""

    exit_code = 1


class UsageError(QuarryError):
    """The command line or settings ask for something impossible."""

    exit_code = 2


class StoreNotFound(QuarryError):
    """No index exists at the given store directory: run `quarry index` first."""


class NotFound(QuarryError):
    """No such document or chunk in the committed index, or none the caller may read (the two
    are never told apart, so that an id says nothing about documents a caller cannot read)."""


class StoreLocked(QuarryError):
    """Another index run holds the store's writer lock. ``holder``: what the lock file says of the
    holder (``pid``, ``host``, ``started``, and for a flow run its ``deployment`` and
    ``initial_run``); empty when unknown."""

    def __init__(self, message: str, holder: dict[str, Any] | None = None):
        super().__init__(message)
        self.holder: dict[str, Any] = holder or {}


class RunRefused(QuarryError):
    """The run stopped before writing anything: it would have deleted more than the deletion guard
    allows (quarry/ingest/guard.py). ``--allow-deletes`` lets it through."""

    exit_code = 4


class StoreCorrupt(QuarryError):
    """A store file (CURRENT, a catalog, the vectors, the index files) is damaged or missing:
    run `quarry doctor` to check and repair."""


class ModelMismatch(QuarryError):
    """The index was built with a different embedding model than the one asked for."""


class ParseError(QuarryError):
    """A file of a supported type could not be read (encrypted, corrupt, binary under a text name)."""


class UnsupportedFile(QuarryError):
    """A file of a type quarry does not read; skipped and counted, not a failure."""


class EmbeddingError(QuarryError):
    """The embedding backend failed or returned vectors of the wrong shape."""


class ConfigError(UsageError):
    """A setting has an invalid value."""


class QualityBelowThreshold(QuarryError):
    """An evaluation scored below a `--fail-under` threshold; the message holds the figures."""

    exit_code = 5
