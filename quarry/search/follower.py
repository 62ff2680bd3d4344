"""Following a store's commits: the snapshot a reader reads, moved to each new commit, pinned per call.

A call pins the current snapshot and reads only it, however long it takes and whatever commits
meanwhile; other threads' calls pin their own. A snapshot a commit replaced is closed when its
last pinned call ends. So a server answers every request from one generation and picks up a new
one at the next request, without a restart or a pause. On object storage, checking for a commit is
one GET of the remote ``CURRENT`` (at most every ``QUARRY_REMOTE_CHECK_SECONDS``), and a new
generation is downloaded once, by one thread, while the others keep answering.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from quarry.store.handle import Store, as_store
from quarry.store.pointer import POINTER
from quarry.store.reader import Snapshot, open_snapshot
from quarry.store.remote import check_seconds

__all__ = ["LRU", "Follower"]


class LRU(OrderedDict):
    """A bounded mapping, least recently used out first; safe to share between threads."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size
        self._guard = threading.Lock()

    def get(self, key, default=None):
        with self._guard:
            if key in self:
                self.move_to_end(key)
                return self[key]
            return default

    def put(self, key, value) -> None:
        with self._guard:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self.size:
                self.popitem(last=False)

    def clear(self) -> None:
        with self._guard:
            super().clear()


class Follower:
    """The committed snapshot of ``store`` a reader is on; ``on_change()`` is called when it moves."""

    def __init__(self, store: Store | Path, on_change: Callable[[], None] | None = None):
        self.store = as_store(store)
        self._on_change = on_change or (lambda: None)
        self._snap: Snapshot | None = None
        self._pointer_stat: tuple[int, int] | None = None
        self._guard = threading.RLock()  # swaps of the current snapshot
        self._pull = threading.Lock()  # one download of a remote generation at a time
        self._local = threading.local()  # .snap: the snapshot this thread's call is pinned to

    def _current_stat(self) -> tuple[int, int] | None:
        remote = self.store.remote
        if remote is not None and self._pull.acquire(blocking=False):
            try:
                remote.pull(self.store.folder, max_age=check_seconds())
            except Exception as exc:
                if self._snap is None:
                    raise
                logging.getLogger("quarry").warning(
                    "%s: cannot check for a newer generation (%s); still answering from generation %d",
                    remote.url,
                    exc,
                    self._snap.pointer.generation,
                )
            finally:
                self._pull.release()
        try:
            st = os.stat(self.store.folder / POINTER)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def acquire(self, pin: bool) -> Snapshot:
        """The current snapshot, after moving to a newer committed one if CURRENT changed; with
        ``pin``, counted as in use until :meth:`release`."""
        stat = self._current_stat()  # outside the lock: on object storage it is a GET
        with self._guard:
            if self._snap is None or stat != self._pointer_stat:
                fresh = open_snapshot(self.store.folder)
                old, self._snap, self._pointer_stat = self._snap, fresh, stat
                self._on_change()
                if old is not None:
                    old.retired = True
                    if old.users == 0:
                        old.close()
            snap = self._snap
            if pin:
                snap.users += 1
            return snap

    def release(self, snap: Snapshot) -> None:
        with self._guard:
            snap.users -= 1
            if snap.retired and snap.users == 0:
                snap.close()

    @property
    def current(self) -> Snapshot:
        """This thread's pinned snapshot inside a call, else the current one."""
        pinned = getattr(self._local, "snap", None)
        if pinned is not None:
            return pinned
        return self.acquire(pin=False)

    @contextmanager
    def pinned(self) -> Iterator[Snapshot]:
        """One snapshot for this thread's calls inside the block (nested blocks allowed)."""
        pinned = getattr(self._local, "snap", None)
        if pinned is not None:
            yield pinned
            return
        snap = self.acquire(pin=True)
        self._local.snap = snap
        try:
            yield snap
        finally:
            self._local.snap = None
            self.release(snap)

    def close(self) -> None:
        with self._guard:
            if self._snap is not None:
                self._snap.retired = True
                if self._snap.users == 0:
                    self._snap.close()
                self._snap = None
