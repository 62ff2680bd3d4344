"""DuckDB's full-text tables for SQL users: ``fts-<gen>.duckdb`` beside each generation's catalog.

quarry searches its own BM25 files (quarry/retrieval); DuckDB's FTS index (``match_bm25`` in
plain SQL, docs/export.md) is for people who query the catalog. It covers one table, so it cannot
live in a layered catalog (quarry/store/layers.py) without copying the whole catalog at every
commit. It lives in a sidecar file of its own instead, one per generation: the chunks' ids and the
``fts_main_chunks`` schema DuckDB's ``create_fts_index`` builds over their ``search_text``.

It is built when it is needed, never by a commit:

- a commit that changed no chunk (a move, a touch, new permissions, a merge) links the previous
  generation's file when that one is built (:func:`carry`: a hard link, O(1)); any other commit
  leaves the new generation without one and starts nothing;
- the first ``match_bm25`` query of a generation builds it (:func:`ensure`, from ``quarry sql``),
  saying so on the log while it builds, and ``quarry maintain`` builds the current one;
- a build runs in a child process, ``python -m quarry.store.fts STORE GENERATION``, at the lowest
  priority (nice 19, idle I/O class), with DuckDB held to ``QUARRY_FTS_MEMORY_MB`` (1,024) of
  memory and ``QUARRY_FTS_THREADS`` (2) threads; DuckDB's FTS build spills only in part (at
  100,000 chunks 150 MB runs out, 400 MB with one thread builds), so a build that runs out starts
  again with twice the cap, up to half the machine's memory; its wall and CPU seconds, peak
  memory and the cap it finished under are kept in the file's ``build`` row (``quarry status --json``);
- builds take one store-wide lock, ``fts.lock`` (flock: a killed builder's lock goes with it), so
  a machine builds a store's tables once at a time: a second query waits for the first's build;
- a build writes ``fts-<gen>.duckdb.tmp-<pid>`` and renames it into place: a reader sees a whole
  file or none, and the next builder removes what a killed one left;
- the retention removes the files of generations it no longer keeps (:func:`remove_unkept`).

Why not per commit. Until now a commit that changed a chunk started a whole build in the
background: at a million chunks 172-176 s at ~190% CPU and 3.2-4.9 GB resident, once per
commit, through a series of fifteen-minute runs, for a table only SQL users read. Two ways
to make it cost what changed were weighed. Per-layer tables (DuckDB's index is plain tables,
``docs``/``terms``/``dict``/``stats``; a layer's could be built from its own chunks only)
keep ``match_bm25``'s meaning only if ``df``, ``num_docs`` and ``avgdl`` are over the live rows
of every layer: the macro reads them from ``dict`` and ``stats``, so views over the layers must
subtract the rows later layers replaced, counted from ``terms`` (a row per token: ~150 million at
a million chunks) at query time, and ``match_bm25`` itself scans ``terms`` whole for each query
term. Measured at 100,000 chunks (14.1 million ``terms`` rows, one thread): the ``df`` of two
words counted from ``terms`` over the live rows took 150 ms, read from ``dict`` 1.2 ms, so
exact per-layer statistics would add about that to every query (ten times it at a million
chunks) besides the merging. The other: build on demand. Measured (docs/benchmarks.md,
*Full-text tables on demand*): a build at 100,000 chunks is 33-36 s of CPU and 0.8-0.9 GB at
peak under the cap, which the first ``match_bm25`` query after a change pays once, and a commit
pays nothing, not even a process (``bench/scale.py``: no process left behind by ``edit_1``,
``edit_100`` or ``move_1000``; before, 18.6 and 31.3 s of CPU and 0.77 GB each). Chosen: on
demand, with ``quarry maintain`` building it so that a maintained store answers at once.
Per-layer tables remain the way to make the first query after a change cheap, at the price of
statistics computed per query.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb

from quarry.core import faults
from quarry.core.environment import environment
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
    "build_info",
    "carry",
    "ensure",
    "file_name",
    "path",
    "remove_unkept",
    "state",
    "summary",
    "uses_fts",
    "wait",
]

ALIAS = "quarry_fts"  # the sidecar's name when attached to a catalog connection
SCHEMA = "fts_main_chunks"  # DuckDB names an FTS index's schema after its table
LOCK = "fts.lock"
BUILD_FAULT = "fts-build"  # QUARRY_FAULT point: the sidecar's tables are built, not yet renamed into place
NICE = 19  # the builder's niceness: the lowest; a run and the readers go first
_FILE = re.compile(r"^fts-(\d+)\.duckdb(?:\.tmp-\d+)?(?:\.wal|\.spill)?$")
_USES = re.compile(r"\b(?:match_bm25|fts_main_chunks)\b", re.IGNORECASE)

log = logging.getLogger("quarry")


def file_name(generation: int) -> str:
    """``fts-000007.duckdb``: the sidecar of generation ``generation``."""
    return f"fts-{generation:06d}.duckdb"


def path(store: Path, generation: int) -> Path:
    return store / file_name(generation)


def available() -> bool:
    """Whether DuckDB's FTS extension is installed (``duckdb-ext-fts``, a base dependency)."""
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
    ``state`` (:func:`state`: ``missing`` until the first ``match_bm25`` query or ``quarry
    maintain`` builds them; ``off`` when ``QUARRY_DUCKDB_FTS=0`` left none), ``file``, and once
    built, ``build``: what building them cost (:func:`build_info`)."""
    now = state(store, generation)
    if now == "missing" and not enabled:
        now = "off"
    elif now == "missing" and not available():
        now = "unavailable"  # duckdb-ext-fts is missing from this install
    out: dict[str, Any] = {"state": now, "file": str(path(store, generation))}
    if now == "ready":
        try:
            out["build"] = build_info(store, generation)
        except (OSError, duckdb.Error):  # removed by the retention meanwhile, or being replaced
            out["build"] = None
    return out


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
    assert fd is not None  # a blocking lock waits for its turn
    try:
        target = path(store, generation)
        if target.is_file():
            return target
        for debris in store.glob(f"{target.name}.tmp-*"):  # a killed builder's (the lock is ours)
            _remove(debris)
        t0 = time.perf_counter()
        tmp = Path(f"{target}.tmp-{os.getpid()}")
        limit, ceiling = environment().fts_memory_mb, max(environment().fts_memory_mb, memory_ceiling_mb())
        try:
            while True:
                try:
                    rows = _write(store, generation, tmp, t0, limit)
                    break
                except duckdb.OutOfMemoryException:
                    # DuckDB's FTS build spills only in part: it needs ~1 GB a 100,000 chunks
                    if limit >= ceiling:
                        raise
                    log.warning(
                        "full-text tables of generation %d need more than %d MB: building again with %d MB "
                        "(QUARRY_FTS_MEMORY_MB)",
                        generation,
                        limit,
                        min(ceiling, limit * 2),
                    )
                    limit = min(ceiling, limit * 2)
                    for leftover in (tmp, Path(f"{tmp}.wal")):
                        leftover.unlink(missing_ok=True)
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


def memory_ceiling_mb() -> int:
    """Half the machine's memory: the most a builder's DuckDB is given after running out (:func:`build`)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**21)
    except (ValueError, OSError):
        return 4096


def _write(store: Path, generation: int, tmp: Path, t0: float, memory_mb: int) -> int:
    """Write the sidecar into ``tmp``: the committed chunks' ids and search text, DuckDB's FTS index
    over them, then the text dropped (``match_bm25`` reads only the index's own tables); and the
    ``build`` row (:func:`build_info`)."""
    env = environment()
    spill = Path(f"{tmp}.spill")
    con = duckdb.connect(str(tmp))
    private: list[Path] = []
    try:
        con.execute(f"LOAD '{catalog.fts_extension_path()}'")
        con.execute("SET enable_progress_bar = false")
        # bounded: DuckDB spills past the cap into the store's folder (removed below)
        con.execute(f"SET memory_limit = '{int(memory_mb)}MB'")
        con.execute(f"SET threads = {int(env.fts_threads)}")
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET temp_directory = ?", [str(spill)])
        own = layers.alias(generation)
        if not (store / f"{own}.duckdb").is_file():
            raise QuarryError(
                f"{store / f'{own}.duckdb'}, the catalog of generation {generation}, is missing: "
                "a newer commit removed it; query the current one"
            )
        private = layers.attach(con, store, [generation])
        private += layers.attach(con, store, layers.chain_of(con, generation, own)[:-1])
        # the alias is made of the generation number (an identifier: no bound parameter can name it)
        con.execute(f"CREATE TABLE chunks AS SELECT chunk_id, search_text FROM {_quoted(own)}.main.chunks")
        con.execute(load_sql("fts_rebuild"))
        con.execute("DROP TABLE chunks")
        counted = con.execute(f"SELECT count(*) FROM {SCHEMA}.docs").fetchone()
        assert counted is not None  # count(*): one row
        rows = int(counted[0])
        con.execute("CHECKPOINT")
        # the cost, of the whole process (the builder's own, when it runs as python -m quarry.store.fts)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        con.execute(
            "CREATE TABLE build AS SELECT ?::INTEGER AS generation, ?::BIGINT AS chunks, "
            "?::DOUBLE AS seconds, ?::DOUBLE AS cpu_seconds, ?::INTEGER AS peak_rss_mb, "
            "?::INTEGER AS memory_limit_mb, ?::INTEGER AS threads, now() AS built_at",
            [
                generation,
                rows,
                time.perf_counter() - t0,
                usage.ru_utime + usage.ru_stime,
                usage.ru_maxrss // 1024,
                memory_mb,
                env.fts_threads,
            ],
        )
        con.execute("CHECKPOINT")
        return rows
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
        for folder in private:
            shutil.rmtree(folder, ignore_errors=True)


def _remove(p: Path) -> None:
    """A sidecar or a builder's leftover: a file, or the folder a build spilled into."""
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(p: Path) -> str:
    return "'" + str(p).replace("'", "''") + "'"


def carry(store: Path, generation: int, previous: int) -> bool:
    """Give generation ``generation`` the sidecar of ``previous`` (a commit that changed no chunk:
    the same tables answer), as a hard link; False when ``previous`` has none or links fail. A
    commit builds nothing: the first ``match_bm25`` query or ``quarry maintain`` does (:func:`ensure`)."""
    source = path(store, previous)
    if not source.is_file():
        return False
    try:
        os.link(source, path(store, generation))
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: built when asked
        return False
    return True


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
    """The sidecar of generation ``generation``, built first when it is missing: in a child process
    at the lowest priority (:func:`main`), this call waiting for it (and for a build under way).
    Raises :class:`UsageError` when DuckDB's FTS extension is not installed, :class:`QuarryError`
    when the build fails."""
    target = path(store, generation)
    if target.is_file():
        return target
    if not available():
        raise UsageError(
            "match_bm25 needs DuckDB's FTS extension, a dependency of quarry: pip install 'duckdb-ext-fts==1.4.4.*'"
        )
    log.warning(
        "building DuckDB's full-text tables of generation %d for match_bm25 (once per generation that "
        "changed chunks; quarry maintain builds them ahead): %s",
        generation,
        target,
    )
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "quarry.store.fts", str(store), str(generation)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if not target.is_file():
        why = (proc.stderr or "").strip().splitlines()
        raise QuarryError(
            f"{target}: DuckDB's full-text tables were not built (exit {proc.returncode}): "
            f"{why[-1] if why else 'no message'}"
        )
    log.info("full-text tables of generation %d ready in %.1f s", generation, time.perf_counter() - t0)
    return target


def build_info(store: Path, generation: int) -> dict | None:
    """The generation the sidecar was built for (an earlier one when a commit carried it over), its
    chunks, its builder's wall and CPU seconds, peak memory and limits; None when there is none."""
    target = path(store, generation)
    if not target.is_file():
        return None
    with duckdb.connect(str(target), read_only=True) as con:
        cur = con.execute("SELECT * FROM build")
        values = cur.fetchone()
        assert values is not None  # the builder writes its one row before the file is renamed into place
        row = dict(zip([d[0] for d in cur.description], values))
    if row.get("built_at") is not None:
        row["built_at"] = str(row["built_at"])
    return row


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
        _remove(p)
        removed.append(p.name)
    return removed


def lower_priority() -> None:
    """This process at the lowest CPU and I/O priority (nice 19, the idle I/O class)."""
    try:
        os.nice(NICE - os.nice(0))
    except OSError:
        pass
    try:
        import psutil
    except ImportError:
        return
    try:
        psutil.Process().ionice(psutil.IOPRIO_CLASS_IDLE)
    except (AttributeError, OSError, psutil.Error):  # not Linux, or not allowed
        pass


def main(argv: list[str]) -> int:
    """The builder: ``python -m quarry.store.fts STORE [GENERATION]`` builds the tables of
    ``GENERATION`` (default: the one ``CURRENT`` names) at the lowest priority."""
    if len(argv) not in (1, 2) or not all(a.isdigit() for a in argv[1:]):
        print("usage: python -m quarry.store.fts STORE [GENERATION]", file=sys.stderr)
        return 2
    lower_priority()
    store = Path(argv[0])
    try:
        if len(argv) == 2:
            generation = int(argv[1])
        elif (pointer := read_pointer(store)) is not None:
            generation = pointer.generation
        else:
            print(f"{store}: no committed generation", file=sys.stderr)
            return 1
        build(store, generation)
    except (OSError, duckdb.Error, QuarryError) as exc:  # a full disk, a damaged catalog
        print(f"full-text tables of {argv[0]} not built: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
