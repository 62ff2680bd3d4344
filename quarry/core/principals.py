"""Principals: who may read a document, and who a caller is.

A principal is ``public`` or ``kind:name`` (``user:alice``, ``group:finance``,
``role:auditor``). Every document carries the principals that may read it
(``documents.principals``; set by ``quarry index --acl-rules`` / ``--acl posix``, ``public``
without either); a caller (an API key, ``quarry search --as``, ``Index.search(principals=...)``)
holds a set of principals, and reads a document when the two share one. ``public`` is implied for
every caller. A document whose principals are empty (or NULL: not yet decided) is read by no one
but an unrestricted caller (the store's owner, an admin key).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from quarry.core.errors import UsageError

PUBLIC = "public"
_KIND = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
_BAD = re.compile(r"[\x00-\x1f\x7f,]")  # control characters (newlines join principals in SQL), commas
MAX_NAME = 256


def check(principal: str) -> str:
    """``principal`` stripped, or :class:`UsageError` saying what a principal looks like."""
    if not isinstance(principal, str):
        raise UsageError(f"a principal is text such as user:alice, got {type(principal).__name__}")
    value = principal.strip()
    if value == PUBLIC:
        return value
    kind, sep, name = value.partition(":")
    name = name.strip()
    if not sep or not _KIND.match(kind) or not name or len(name) > MAX_NAME or _BAD.search(name):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise UsageError(
            f"{shown!r} is not a principal: use public or kind:name, e.g. user:alice or group:finance "
            f"(lower-case kind; a name of 1-{MAX_NAME} characters without commas or control characters)"
        )
    return f"{kind}:{name}"


def normalise(principals: Iterable[str] | str | None) -> tuple[str, ...]:
    """Checked principals, each once, sorted (a comma-separated string is split)."""
    if principals is None:
        return ()
    if isinstance(principals, str):
        principals = [p for p in principals.split(",") if p.strip()]
    return tuple(sorted({check(p) for p in principals}))


def caller(principals: Iterable[str] | str | None) -> tuple[str, ...]:
    """What a caller holding ``principals`` may read as: those, plus ``public``."""
    return tuple(sorted({*normalise(principals), PUBLIC}))
