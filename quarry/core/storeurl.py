"""Store URLs (``s3://bucket/prefix``) and the local folder that stands for each.

A store on object storage is worked on through a local folder,
``$QUARRY_STORE_CACHE/<16 hex digits of sha256(url)>/`` (default ``~/.cache/quarry/stores/``), whose
file ``REMOTE`` names the URL; :mod:`quarry.store.remote` moves the committed state between the two.
This module only parses and names: it imports nothing above ``core``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from quarry.core.environment import environment
from quarry.core.errors import UsageError

if TYPE_CHECKING:
    from quarry.core.registry import Factory, Registry

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
MARKER = "REMOTE"


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: ``scheme://bucket/prefix`` (``file``: bucket is empty, prefix a path)."""

    scheme: str
    bucket: str
    prefix: str  # no leading or trailing slash

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file:///{self.prefix}"
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    def join(self, *parts: str) -> str:
        """The URL of ``parts`` under this store (as LanceDB wants it)."""
        return "/".join([str(self).rstrip("/"), *parts])


def is_url(db: object) -> TypeGuard[str]:
    """Whether ``db`` names a store by URL (``s3://``, ``gs://``, ``az://``, ``file://``)."""
    return isinstance(db, str) and _URL.match(db) is not None


def parse_url(db: str) -> StoreURL:
    """Parse a store URL; :class:`UsageError` names what is wrong with it."""
    m = _URL.match(db)
    if not m:
        raise UsageError(f"{db!r} is not a store URL (s3://bucket/prefix)")
    scheme, rest = m.group(1).lower(), m.group(2)
    from quarry.core.registry import STORES  # the schemes of the object-store backends, plugins' included

    if scheme not in STORES:
        raise UsageError(
            f"unknown store URL scheme {scheme!r} in {db!r}; use one of {', '.join(STORES)} or a local directory"
        )
    if scheme == "file":
        path = os.path.abspath(os.path.expanduser(rest or "/"))
        return StoreURL("file", "", path.strip("/"))
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UsageError(f"{db!r} names no bucket: write {scheme}://bucket/prefix")
    return StoreURL(scheme, bucket, prefix.strip("/"))


def cache_root() -> Path:
    """Where remote stores are worked on: ``$QUARRY_STORE_CACHE`` or ``~/.cache/quarry/stores``."""
    return Path(environment().store_cache or Path.home() / ".cache" / "quarry" / "stores").expanduser()


def local_dir(db: str) -> Path:
    """The local folder of the store at URL ``db`` (created, with its ``REMOTE`` marker)."""
    url = parse_url(db)
    folder = cache_root() / hashlib.sha256(str(url).encode()).hexdigest()[:16]
    marker = folder / MARKER
    if not marker.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{MARKER}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"url": str(url)}) + "\n", encoding="utf-8")
        os.replace(tmp, marker)
    return folder


# --- roots on object storage ------------------------------------------------------------------


def _source_schemes() -> Registry[Factory]:
    """The schemes a root of an index run may have (``s3``, ``gs``, ``az``, a plugin's): the
    :data:`~quarry.core.registry.SOURCES` registry, whose readers list and read them where they live."""
    from quarry.core.registry import SOURCES

    return SOURCES


def is_source_url(root: object) -> bool:
    """Whether ``root`` names a tree on object storage (a scheme of the ``SOURCES`` registry)."""
    if not isinstance(root, str):
        return False
    m = _URL.match(root)
    return m is not None and m.group(1).lower() in _source_schemes()


def root_path(root: str | os.PathLike[str]) -> str:
    """A root of an index run as the run keeps it: ``scheme://bucket/prefix`` (no trailing slash) for a
    tree on object storage, else an absolute path (``file:///x`` is the folder ``/x``).

    :class:`UsageError` for a scheme quarry does not read, a URL without a bucket, or one carrying a
    query string (a SAS token or a key belongs in the environment, where the SDK reads it, never
    in a root that runs, logs and the catalog keep).
    """
    text = os.fspath(root)
    m = _URL.match(text) if isinstance(text, str) else None
    if m is None:
        return str(Path(text).expanduser().absolute())
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme == "file":
        return os.path.abspath(os.path.expanduser(rest or "/"))
    if scheme not in _source_schemes():
        raise UsageError(
            f"cannot index {text!r}: quarry reads local paths and "
            f"{', '.join(s + '://' for s in _source_schemes())} URLs"
        )
    if "?" in rest or "#" in rest:
        raise UsageError(
            f"{scheme}://{rest.split('?')[0].split('#')[0]}: remove the query string; credentials "
            "(keys, SAS tokens) come from the environment, never from the URL"
        )
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UsageError(f"{text!r} names no bucket: write {scheme}://bucket/prefix")
    prefix = prefix.strip("/")
    return f"{scheme}://{bucket}/{prefix}" if prefix else f"{scheme}://{bucket}"
