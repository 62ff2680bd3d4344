"""File names that are not valid UTF-8, stored losslessly and shown escaped.

POSIX file names are bytes. Python hands a name that is not valid UTF-8 (a Latin-1 ``café.md``
from an old share) to quarry as a ``str`` holding lone surrogates (PEP 383 ``surrogateescape``):
such a string opens the file, but cannot be encoded to UTF-8, so it cannot go into Arrow,
DuckDB, LanceDB, JSON logs or a terminal as it is.

quarry keeps the real name in memory (``FileInfo.path``, used to open the file) and stores two
columns (see docs/ARCHITECTURE.md):

- ``documents.path``: the **display** form, always valid UTF-8: every byte that is not part of
  valid UTF-8 is written ``\\xNN`` (``/share/caf\\xe9.md``). Plain SQL and globs work on it.
- ``documents.path_bytes``: the exact bytes of the name (BLOB) when it is not valid UTF-8,
  else NULL. ``coalesce(path_bytes, encode(path))`` is the real name, byte for byte.

:func:`from_catalog` turns the two back into the in-memory form, so that a re-run matches
the stored document and sees the file as unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from quarry.core.errors import UsageError

__all__ = ["ARCHIVE_SEP", "display", "raw_bytes", "from_catalog", "is_clean", "printable", "check_patterns"]

# A member of an archive is named "<archive>!/<member>" (quarry/ingest/parsers/archive.py).
ARCHIVE_SEP = "!/"


def is_clean(path: str) -> bool:
    """Whether ``path`` encodes to UTF-8 as it is (no surrogate-escaped bytes)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def display(path: str) -> str:
    """``path`` as valid UTF-8 text: undecodable bytes as ``\\xNN``; clean paths are returned as they are."""
    if path.isascii() or is_clean(path):  # isascii: no encoding for most names (discovery asks per file)
        return path
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def raw_bytes(path: str) -> bytes | None:
    """The exact bytes of a name that is not valid UTF-8, or None for a clean one."""
    return None if is_clean(path) else os.fsencode(path)


def from_catalog(path: str, path_bytes: bytes | None) -> str:
    """The in-memory (``surrogateescape``) form of a stored path."""
    return os.fsdecode(bytes(path_bytes)) if path_bytes is not None else path


def printable(path: str) -> str:
    """``path`` for one line of terminal output: display form with control characters escaped
    (a newline or tab in a file name must not break a ``failed: PATH: cause`` line)."""
    text = display(path)
    if not any(ch < " " or ch == "\x7f" for ch in text):
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii") if ch < " " or ch == "\x7f" else ch for ch in text)


def check_patterns(patterns: Iterable[str], flag: str = "") -> tuple[str, ...]:
    """The glob patterns of ``flag`` (``--include``/``--exclude``), or :class:`UsageError` for one
    that cannot mean what its author meant: empty, or a ``[`` never closed (fnmatch would take
    it literally and match nothing)."""
    out = tuple(patterns)
    for pattern in out:
        where = f"{flag} pattern {pattern!r}".strip()
        if not pattern.strip():
            raise UsageError(f"{where} is empty and matches nothing; remove it")
        if "\0" in pattern:
            raise UsageError(f"{where} holds a NUL byte")
        i = pattern.find("[")
        while i != -1:
            close = pattern.find("]", i + 2)  # "[]x]": a ] right after [ is part of the set
            if close == -1:
                raise UsageError(
                    f"{where} opens a character set with '[' that is never closed; to match a literal '[', write '[[]'"
                )
            i = pattern.find("[", close + 1)
    return out
