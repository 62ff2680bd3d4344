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
from dataclasses import asdict, dataclass
from pathlib import Path

from quarry.core.errors import StoreCorrupt, StoreLocked, StoreNotFound
from quarry.core.safeio import fsync_dir

POINTER = "CURRENT"
LOCK = "lock"
DOCTOR_HINT = "run `quarry doctor --db {store}` to check the store and `--repair` what is repairable"


@dataclass(frozen=True)
class Pointer:
    """The committed state of a store."""

    generation: int
    catalog: str  # file name of the catalog, relative to the store
    vector_table: str  # LanceDB table name ("" before the first commit with vectors)
    vector_version: int  # committed LanceDB table version (0 = empty table)
    model: str
    dim: int
    committed_at: float
    layers: tuple[int, ...] = ()  # the catalog generations this one reads, base first, itself last (layers.py)

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple(int(g) for g in self.layers or ()))

    @staticmethod
    def catalog_name(generation: int) -> str:
        return f"catalog-{generation:06d}.duckdb"


def read_pointer(store: Path) -> Pointer | None:
    """The committed pointer, or None when the store has never been committed."""
    path = store / POINTER
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreCorrupt(f"{path} cannot be read ({type(exc).__name__}): {DOCTOR_HINT.format(store=store)}") from exc
    try:
        pointer = Pointer(**json.loads(raw))
        if not isinstance(pointer.generation, int) or not isinstance(pointer.catalog, str) or "/" in pointer.catalog:
            raise ValueError("bad field types")
    except (ValueError, TypeError) as exc:  # truncated, edited by hand, or not JSON at all
        hint = DOCTOR_HINT.format(store=store)
        raise StoreCorrupt(f"{path} is damaged (not a valid commit pointer): {hint}") from exc
    return pointer


def require_pointer(store: Path) -> Pointer:
    """The committed pointer; :class:`StoreNotFound` when there is none."""
    pointer = read_pointer(store)
    if pointer is None:
        from quarry.store.remote import display

        name = display(store)  # the URL of a store on object storage, not its local folder
        raise StoreNotFound(f"no index at {name}: run `quarry index PATH --db {name}` first")
    return pointer



def write_pointer(store: Path, pointer: Pointer, upload: bool = True) -> None:
    """Atomically replace CURRENT (write, fsync, rename, fsync the directory): the commit.

    For a store on object storage the generation's files are uploaded and the remote CURRENT is
    moved by a conditional put first (:meth:`quarry.store.remote.Remote.commit`): that is the
    commit point, and the local CURRENT follows it. ``upload=False`` moves only the pointer (same
    generation and files, another LanceDB version: ``quarry maintain``).
    """
    from quarry.store.remote import remote_of

    remote = remote_of(store)
    if remote is not None:
        remote.commit(store, pointer, upload=upload)
    write_local_pointer(store, pointer)
    if remote is not None:
        remote.after_commit(pointer)


def write_local_pointer(store: Path, pointer: Pointer) -> None:
    """Atomically replace the local CURRENT file."""
    tmp = store / f".{POINTER}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(asdict(pointer), fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, store / POINTER)
    fsync_dir(store)


# flock is per open file description, so one process taking the lock twice would deadlock
# itself; a process-wide registry makes the lock re-entrant (the CLI and the flow both take it).
_held: dict[str, tuple[int, int]] = {}
_held_guard = threading.Lock()


class WriterLock:
    """Exclusive writer lock on a store, held with ``flock``.

    The kernel drops an flock when its process dies, so a lock left by a killed run is never
    stale: the next run simply gets it. The file's JSON names the holder for error messages.
    """

    def __init__(self, store: Path):
        self.store = store
        self.path = store / LOCK

    def acquire(self) -> WriterLock:
        key = str(self.path)
        with _held_guard:
            if key in _held:
                fd, depth = _held[key]
                _held[key] = (fd, depth + 1)
                return self
            self.store.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._describe_holder(fd)
                os.close(fd)
                raise StoreLocked(
                    f"store {self.store} is locked by another index run ({holder}); wait for it to finish"
                ) from None
            info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode(), 0)
            os.fsync(fd)
            # A store on object storage: the flock guards the local folder; the lease, the store.
            from quarry.store.remote import remote_of

            remote = remote_of(self.store)
            if remote is not None:
                try:
                    remote.acquire(self.store)
                except BaseException:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                    raise
            _held[key] = (fd, 1)
            return self

    @staticmethod
    def _describe_holder(fd: int) -> str:
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"{}")
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["started"]))
            return f"pid {info['pid']} on {info['host']}, started {started}"
        except (ValueError, KeyError, TypeError):
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
            from quarry.store.remote import remote_of

            remote = remote_of(self.store)
            if remote is not None:
                try:
                    remote.release()
                except Exception:  # the lease expires by itself
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


def new_run_id() -> str:
    """A run id: sortable by start time (UTC), unique across processes."""
    import datetime as _dt
    import uuid

    return f"{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
