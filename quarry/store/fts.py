"""DuckDB's full-text tables for SQL users: ``fts-<gen>.duckdb`` beside each generation's catalog.

quarry searches its own BM25 files (quarry/retrieval); DuckDB's FTS index (``match_bm25`` in
plain SQL, docs/export.md) is for people who query the catalog. It covers one table, so it cannot
live in a layered catalog (quarry/store/layers.py) without copying the whole catalog at every
commit. It lives in a sidecar file of its own instead, one per generation: the chunks' ids and the
``fts_main_chunks`` schema DuckDB's ``create_fts_index`` builds over their ``search_text``.

It is built *after* the pointer moves, never inside the commit:

- :func:`start` (from the writer, once ``CURRENT`` names the new generation) links the previous
  generation's file when the commit changed no chunk (a move, a touch, new permissions, a merge),
  else starts a detached child, ``python -m quarry.store.fts STORE``, at low priority;
- builds take one store-wide lock, ``fts.lock`` (flock: a killed builder's lock goes with it); a
  commit that finds it held starts nothing: the builder at work builds whatever generation is
  current when it finishes (:func:`build_current`), so a burst of commits costs one builder and
  the builds of the generations it skipped;
- a build writes ``fts-<gen>.duckdb.tmp-<pid>`` and renames it into place: a reader sees a whole
  file or none, and the next builder removes what a killed one left;
- ``quarry sql`` attaches the file for queries that use it (:func:`uses_fts`), waiting for a build
  under way or building it itself when it is missing (:func:`ensure`);
- the retention removes the files of generations it no longer keeps (:func:`remove_unkept`).

Nothing else reads these files: the index answers searches without them, ``quarry doctor``
ignores them, and a missing or half-written one costs only the next ``match_bm25`` query a build.
On object storage they are built in the store's local folder and never uploaded.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from quarry.core import faults
from quarry.core.errors import QuarryError, UsageError
from quarry.core.sqlfiles import load_sql
from quarry.store import catalog, layers
from quarry.store.pointer import read_pointer

__all__ = [
    "ALIAS",
    "BUILD_FAULT",
    "SCHEMA",
    "attach",
    "available",
    "build",
    "build_current",
    "build_info",
    "ensure",
    "file_name",
    "path",
    "remove_unkept",
    "start",
    "state",
    "summary",
    "uses_fts",
    "wait",
]

ALIAS = "quarry_fts"  # the sidecar's name when attached to a catalog connection
SCHEMA = "fts_main_chunks"  # DuckDB names an FTS index's schema after its table
LOCK = "fts.lock"
BUILD_FAULT = "fts-build"  # QUARRY_FAULT point: the sidecar's tables are built, not yet renamed into place
NICE = 10  # the detached builder's niceness: a commit's next run and the readers go first
_FILE = re.compile(r"^fts-(\d+)\.duckdb(?:\.tmp-\d+)?(?:\.wal)?$")
_USES = re.compile(r"\b(?:match_bm25|fts_main_chunks)\b", re.IGNORECASE)

log = logging.getLogger("quarry")


def file_name(generation: int) -> str:
    """``fts-000007.duckdb``: the sidecar of generation ``generation``."""
    return f"fts-{generation:06d}.duckdb"


def path(store: Path, generation: int) -> Path:
    return store / file_name(generation)


def available() -> bool:
    """Whether DuckDB's FTS extension is installed (the ``fts`` extra)."""
    try:
        catalog.fts_extension_path()
    except QuarryError:
        return False
    return True


def state(store: Path, generation: int) -> str:
    """``ready`` (the file is there), ``building`` (a builder holds the lock) or ``missing``."""
    if path(store, generation).is_file():
        return "ready"
    lock = store / LOCK
    if lock.is_file():
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "building"
        finally:
            os.close(fd)
    return "missing"


def summary(store: Path, generation: int, enabled: bool = True) -> dict:
    """What ``quarry status --json`` says of generation ``generation``'s full-text tables: their
    ``state`` (:func:`state`, or ``off`` when ``QUARRY_DUCKDB_FTS=0`` left none) and ``file``."""
    now = state(store, generation)
    if now == "missing" and not enabled:
        now = "off"
    elif now == "missing" and not available():
        now = "unavailable"  # the fts extra is not installed
    return {"state": now, "file": str(path(store, generation))}


def _lock(store: Path, blocking: bool) -> int | None:
    """The builders' lock (an open descriptor), or None when ``blocking`` is False and it is held."""
    fd = os.open(store / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def build(store: Path, generation: int, lock_fd: int | None = None) -> Path:
    """Build generation ``generation``'s sidecar unless it is there; returns its path. Waits for a
    build under way first, unless ``lock_fd`` is the builders' lock, held already."""
    fd = _lock(store, blocking=True) if lock_fd is None else lock_fd
    try:
        target = path(store, generation)
        if target.is_file():
            return target
        for debris in store.glob(f"{target.name}.tmp-*"):  # a killed builder's (the lock is ours)
            debris.unlink(missing_ok=True)
        t0 = time.perf_counter()
        tmp = Path(f"{target}.tmp-{os.getpid()}")
        try:
            rows = _write(store, generation, tmp, t0)
            faults.point(BUILD_FAULT)
            os.replace(tmp, target)
        finally:
            for leftover in (tmp, Path(f"{tmp}.wal")):
                leftover.unlink(missing_ok=True)
        log.info("full-text tables of generation %d: %d chunks in %.1f s", generation, rows, time.perf_counter() - t0)
        return target
    finally:
        if lock_fd is None:
            os.close(fd)


def build_current(store: Path, lock_fd: int | None = None) -> list[int]:
    """What the detached builder does: build the tables of the generation ``CURRENT`` names, then
    of whatever a commit made current meanwhile, until the current one has them; returns the
    generations built. Gives up at once when another builder holds the lock (that one looks at
    ``CURRENT`` again when it finishes), so a burst of commits leaves one builder, not one each.

    The check after the lock is released closes the race with a commit that moved the pointer
    and found the lock still held: its pointer was written before it tried the lock."""
    built: list[int] = []
    fd = lock_fd
    while True:
        if fd is None:
            fd = _lock(store, blocking=False)
            if fd is None:
                return built
        try:
            while (pointer := read_pointer(store)) is not None and not path(store, pointer.generation).is_file():
                try:
                    build(store, pointer.generation, lock_fd=fd)
                    built.append(pointer.generation)
                except (OSError, duckdb.Error, QuarryError):
                    if read_pointer(store) == pointer:  # not a newer commit's removal: a real failure
                        raise
        finally:
            os.close(fd)
            fd = None
        pointer = read_pointer(store)
        if pointer is None or path(store, pointer.generation).is_file():
            return built


def _write(store: Path, generation: int, tmp: Path, t0: float) -> int:
    """Write the sidecar into ``tmp``: the committed chunks' ids and search text, DuckDB's FTS index
    over them, then the text dropped (``match_bm25`` reads only the index's own tables); and the
    ``build`` row (:func:`build_info`)."""
    con = duckdb.connect(str(tmp))
    private: list[Path] = []
    try:
        con.execute(f"LOAD '{catalog.fts_extension_path()}'")
        con.execute("SET enable_progress_bar = false")
        own = layers.alias(generation)
        if not (store / f"{own}.duckdb").is_file():
            raise QuarryError(f"{store / f'{own}.duckdb'}, the catalog of generation {generation}, is missing: "
                              "a newer commit removed it; query the current one")
        private = layers.attach(con, store, [generation])
        private += layers.attach(con, store, layers.chain_of(con, generation, own)[:-1])
        # the alias is made of the generation number (an identifier: no bound parameter can name it)
        con.execute(f"CREATE TABLE chunks AS SELECT chunk_id, search_text FROM {_quoted(own)}.main.chunks")
        con.execute(load_sql("fts_rebuild"))
        con.execute("DROP TABLE chunks")
        rows = con.execute(f"SELECT count(*) FROM {SCHEMA}.docs").fetchone()[0]
        con.execute("CREATE TABLE build AS SELECT ?::INTEGER AS generation, ?::BIGINT AS chunks, "
                    "?::DOUBLE AS seconds, now() AS built_at", [generation, rows, time.perf_counter() - t0])
        con.execute("CHECKPOINT")
        return rows
    finally:
        con.close()
        for folder in private:
            shutil.rmtree(folder, ignore_errors=True)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(p: Path) -> str:
    return "'" + str(p).replace("'", "''") + "'"


def start(store: Path, generation: int, previous: int | None = None) -> subprocess.Popen | None:
    """Make generation ``generation``'s sidecar, after its pointer moved: link ``previous``'s when
    given (the commit changed no chunk) and that one is built, else start a detached builder.
    Returns the builder's process (None when linked, when the extension is not installed, or when a
    builder is at work already: it builds the newest generation when it finishes)."""
    target = path(store, generation)
    if previous is not None and path(store, previous).is_file():
        try:
            os.link(path(store, previous), target)
            return None
        except FileExistsError:
            return None
        except OSError:  # a file system without hard links: build it
            pass
    if not available():
        log.info("DuckDB's FTS extension is not installed: no full-text tables for SQL (pip install 'duckdb-ext-fts==1.4.4.*', a dependency of quarry)")
        return None
    # The lock, taken here, goes to the child with its descriptor (an flock belongs to the open
    # file, which the child shares): the build shows as under way from the moment the commit
    # returns. A builder holding it already takes this generation on when it finishes.
    fd = _lock(store, blocking=False)
    if fd is None:
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", "quarry.store.fts", str(store), str(fd)], pass_fds=(fd,),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        os.close(fd)


def wait(store: Path, generation: int, timeout: float = 600.0) -> str:
    """Wait until generation ``generation``'s sidecar is ready or no build is under way (at most
    ``timeout`` seconds); returns its :func:`state`."""
    deadline = time.monotonic() + timeout
    while True:
        now = state(store, generation)
        if now != "building" or time.monotonic() >= deadline:
            return now
        time.sleep(0.1)


def ensure(store: Path, generation: int) -> Path:
    """The sidecar of generation ``generation``: waits for a build under way, builds it here when
    none is. Raises :class:`UsageError` when DuckDB's FTS extension is not installed."""
    target = path(store, generation)
    if target.is_file():
        return target
    if not available():
        raise UsageError("match_bm25 needs DuckDB's FTS extension, a dependency of quarry: pip install 'duckdb-ext-fts==1.4.4.*'")
    return build(store, generation)


def build_info(store: Path, generation: int) -> dict | None:
    """The generation the sidecar was built for, its chunks and build seconds; None when there is none."""
    target = path(store, generation)
    if not target.is_file():
        return None
    with duckdb.connect(str(target), read_only=True) as con:
        cur = con.execute("SELECT * FROM build")
        return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def uses_fts(query: str) -> bool:
    """Whether a SQL text names DuckDB's full-text tables or ``match_bm25`` (only such queries load
    the extension, which takes about half a second)."""
    return bool(_USES.search(query or ""))


def attach(con, store: Path, generation: int) -> str:
    """Attach generation ``generation``'s sidecar (built first if need be) to the catalog connection
    ``con``, read-only, with the FTS extension loaded; returns the ``search_path`` under which
    ``fts_main_chunks.match_bm25(chunk_id, 'query')`` resolves beside the catalog's own tables."""
    sidecar = ensure(store, generation)
    con.execute(f"LOAD '{catalog.fts_extension_path()}'")
    con.execute(f"ATTACH IF NOT EXISTS {_literal(sidecar)} AS {ALIAS} (READ_ONLY)")
    current = con.execute("SELECT current_database()").fetchone()[0]
    return f"{_quoted(current)}.main,{ALIAS}.{SCHEMA}"


def remove_unkept(store: Path, stays: set[int], current: int | None, older_than: int | None = None) -> list[str]:
    """Delete the sidecars (finished or half-written) of generations not in ``stays`` or newer than
    ``current`` (with ``older_than``: only of generations below it); returns the names removed. A
    builder writing one of them fails its rename and stops."""
    removed = []
    for p in store.glob("fts-*.duckdb*"):
        m = _FILE.match(p.name)
        if m is None:
            continue
        gen = int(m.group(1))
        if older_than is not None and gen >= older_than:
            continue
        if gen in stays and (current is None or gen <= current):
            continue
        p.unlink(missing_ok=True)
        removed.append(p.name)
    return removed


def main(argv: list[str]) -> int:
    """The detached builder: ``python -m quarry.store.fts STORE [LOCK_FD]`` (``LOCK_FD``: the
    builders' lock, held already) builds the current generation's tables (:func:`build_current`)."""
    if len(argv) not in (1, 2) or not all(a.isdigit() for a in argv[1:]):
        print("usage: python -m quarry.store.fts STORE [LOCK_FD]", file=sys.stderr)
        return 2
    try:
        os.nice(NICE)
    except OSError:
        pass
    try:
        build_current(Path(argv[0]), int(argv[1]) if len(argv) == 2 else None)
    except (OSError, duckdb.Error, QuarryError) as exc:  # a full disk, a damaged catalog
        print(f"full-text tables of {argv[0]} not built: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
