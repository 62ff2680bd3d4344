"""The store directory: the commit pointer, catalog generations and the writer lock.

::

    <store>/
      CURRENT                 JSON pointer to the committed state; replaced by atomic rename
      catalog-<gen>.duckdb    one DuckDB catalog file per generation: a whole catalog, or a layer of the
                              rows that generation changed over earlier ones (quarry/store/layers.py)
      lance/                  LanceDB database; CURRENT names the table and its committed version
      lock                    flock()-ed by the index run that holds the store (JSON: pid, host, start)
      logs/                   the Prefect server's log for runs that start their own

Writing CURRENT is the commit point: everything a run writes before that rename is invisible
to readers, and a run that dies leaves files no pointer names, which the next run removes.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path

from quarry.core.errors import StoreLocked, StoreNotFound
from quarry.store.handle import Store, as_store
from quarry.store.pointer import Pointer, read_pointer, write_local_pointer

LOCK = "lock"


def require_pointer(store: Store | Path) -> Pointer:
    """The committed pointer; :class:`StoreNotFound` when there is none."""
    store = as_store(store)
    pointer = read_pointer(store.folder)
    if pointer is None:
        name = store.name  # the URL of a store on object storage, not its local folder
        raise StoreNotFound(f"no index at {name}: run `quarry index PATH --db {name}` first")
    return pointer


def write_pointer(store: Store | Path, pointer: Pointer, upload: bool = True) -> None:
    """Atomically replace CURRENT (write, fsync, rename, fsync the directory): the commit.

    For a store on object storage the generation's files are uploaded and the remote CURRENT is
    moved by a conditional put first (:meth:`quarry.store.remote.Remote.commit`): that is the
    commit point, and the local CURRENT follows it. ``upload=False`` moves only the pointer (same
    generation and files, another LanceDB version: ``quarry maintain``).
    """
    store = as_store(store)
    remote = store.remote
    if remote is not None:
        remote.commit(store.folder, pointer, upload=upload)
    write_local_pointer(store.folder, pointer)
    if remote is not None:
        remote.after_commit(pointer)


# flock is per open file description, so one process taking the lock twice would deadlock
# itself; a process-wide registry makes the lock re-entrant (the CLI and the flow both take it).
_held: dict[str, tuple[int, int]] = {}
_held_guard = threading.Lock()


class WriterLock:
    """Exclusive writer lock on a store, held with ``flock``.

    The kernel drops an flock when its process dies, so a lock left by a killed run is never
    stale: the next run simply gets it. The file's JSON names the holder for error messages.
    """

    def __init__(self, store: Store | Path):
        self.store = as_store(store)
        self.path = self.store.folder / LOCK

    def acquire(self, owner: dict | None = None) -> WriterLock:
        """Take the lock, or raise :class:`StoreLocked` naming the holder. ``owner``: more about
        this holder for the lock file (JSON values), read back as ``StoreLocked.holder``."""
        key = str(self.path)
        with _held_guard:
            if key in _held:
                fd, depth = _held[key]
                _held[key] = (fd, depth + 1)
                return self
            self.store.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._read_holder(fd)
                os.close(fd)
                raise StoreLocked(
                    f"store {self.store.folder} is locked by another index run ({self._describe(holder)}); "
                    "wait for it to finish",
                    holder,
                ) from None
            info = json.dumps(
                {**(owner or {}), "pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
            )
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode(), 0)
            os.fsync(fd)
            # A store on object storage: the flock guards the local folder; the lease, the store.
            remote = self.store.remote
            if remote is not None:
                try:
                    remote.acquire(self.store.folder)
                except BaseException:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                    raise
            _held[key] = (fd, 1)
            return self

    @staticmethod
    def _read_holder(fd: int) -> dict:
        """The holder's JSON; empty while it is being written, or when unreadable."""
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            return {}
        return info if isinstance(info, dict) else {}

    @staticmethod
    def _describe(holder: dict) -> str:
        try:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["started"]))
            return f"pid {holder['pid']} on {holder['host']}, started {started}"
        except (ValueError, KeyError, TypeError, OverflowError):
            return "holder unknown"

    def release(self) -> None:
        key = str(self.path)
        with _held_guard:
            if key not in _held:
                return
            fd, depth = _held[key]
            if depth > 1:
                _held[key] = (fd, depth - 1)
                return
            del _held[key]
            remote = self.store.remote
            if remote is not None:
                try:
                    remote.release()
                except Exception:  # noqa: BLE001, S110 - the lease expires by itself
                    pass
            try:
                os.ftruncate(fd, 0)  # holder info; a store gone read-only keeps the stale text
            except OSError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def disk_usage(store: Store | Path) -> int:
    """Bytes of every file in the store folder (the generations kept for rollback included; for a
    store on object storage, its local cache)."""
    total = 0
    for folder, _, names in os.walk(as_store(store).folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:  # removed by a commit meanwhile
                pass
    return total


def new_run_id() -> str:
    """A run id: sortable by start time (UTC), unique across processes."""
    import datetime as _dt
    import uuid

    return f"{_dt.datetime.now(_dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
