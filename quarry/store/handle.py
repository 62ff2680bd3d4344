"""The store object: a store opened once from a path or a URL.

:func:`open_store` turns what a user names with ``--db`` (a folder, or ``s3://bucket/prefix`` and
the other schemes of the :data:`~quarry.core.registry.STORES` registry) into a :class:`Store`: its
local folder, the name to show for it, and — for a store on object storage — its
:class:`~quarry.store.remote.Remote`, which holds this process's lease and its view of the remote
``CURRENT``. The writer, the lock, the journal, the doctor, maintenance, rollback and the readers are
handed that object and ask it whether the store is remote; none of them looks it up again.

A process opens each store once: :func:`open_store` keeps the object per folder, so the lock that
took the lease and the commit that needs it work on the same :class:`Remote`. Functions that
still receive a folder (``quarry.open(path)``, tests) call :func:`as_store`, which finds the same
object; a folder whose ``REMOTE`` marker names a URL (the cache of a remote store) opens as that
remote store.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from quarry.core.errors import StoreCorrupt
from quarry.core.settings import store_path
from quarry.core.storeurl import MARKER, StoreURL, is_url, parse_url
from quarry.store.remote import Remote

__all__ = ["Store", "as_store", "open_store"]


class Store:
    """One store: ``folder`` (where it is worked on; for a remote store, its local cache) and
    ``remote`` (the object store behind it, or None for a local store)."""

    def __init__(self, folder: Path, remote: Remote | None = None):
        self.folder = folder
        self.remote = remote

    @property
    def is_remote(self) -> bool:
        return self.remote is not None

    @property
    def url(self) -> StoreURL | None:
        """The URL of a store on object storage; None for a local one."""
        return self.remote.url if self.remote is not None else None

    @property
    def name(self) -> str:
        """The name to show for the store: its URL when it is remote, else its folder."""
        return str(self.remote.url) if self.remote is not None else str(self.folder)

    def __repr__(self) -> str:
        return f"Store({self.name!r})" if self.remote is None else f"Store({self.name!r}, folder={str(self.folder)!r})"


_opened: dict[str, Store] = {}
_opened_guard = threading.Lock()


def open_store(db: str | os.PathLike | Store | None = None) -> Store:
    """The store at ``db``: a folder, a store URL (``s3://bucket/prefix``: its local folder is created,
    :func:`quarry.core.storeurl.local_dir`), or None for ``$QUARRY_DB`` / ``./.quarry``."""
    if isinstance(db, Store):
        return db
    url = parse_url(db) if is_url(db) else None
    return _open(store_path(db), url)


def as_store(store: Store | str | os.PathLike) -> Store:
    """``store`` as a :class:`Store`: itself, or the store at that folder (as given, not resolved),
    the one :func:`open_store` opened when it did."""
    if isinstance(store, Store):
        return store
    return _open(Path(store), None)


def _open(folder: Path, url: StoreURL | None) -> Store:
    key = str(folder)
    with _opened_guard:
        found = _opened.get(key)
    if found is not None and (url is None or found.remote is not None):
        return found
    if url is None:
        url = _marked_url(folder)
    opened = Store(folder, Remote(url) if url is not None else None)
    with _opened_guard:
        found = _opened.get(key)
        if found is None or (url is not None and found.remote is None):  # a URL's folder seen before its marker
            found = _opened[key] = opened
        return found


def _marked_url(folder: Path) -> StoreURL | None:
    """The URL the folder's ``REMOTE`` marker names, or None: a local store."""
    try:
        url = json.loads((folder / MARKER).read_text(encoding="utf-8"))["url"]
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, KeyError) as exc:
        raise StoreCorrupt(f"{folder / MARKER} is damaged: delete {folder} (a cache) and run again") from exc
    return parse_url(url)
