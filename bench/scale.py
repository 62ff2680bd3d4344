"""A whole index run at scale: the real flow on a synthetic tree, then a no-change re-run and queries.

The tree is synthetic (nothing is copied from ../shared/data): ``--chunks / CHUNKS_PER_FILE``
Markdown files under bench/results/scale/tree-<chunks>/, each a title and CHUNKS_PER_FILE
sections of one ~700-character paragraph (one chunk each at the default 800-character chunk
size). Words are drawn, with a fixed seed, from a Zipf distribution (s = 1.1) over 30,000
pronounceable pseudo-words built from syllables, so BM25 sees a realistic long-tailed
vocabulary; one paragraph in 20 carries a code such as FY2018 or v1.4.4. The tree is cached and
reused when its parameters match.

For each row it runs ``quarry.flows.index.index_flow`` in a child process (a fresh store, the
given embedder; the ``hash`` embedder at 384 dimensions measures the pipeline without a model)
and samples the resident memory of that process and all its descendants every 0.2 s (the
peak of the sum is ``peak_rss_mb``; ``peak_rss_mb_batches`` and ``peak_rss_mb_commit`` split it
at the start of the commit, ``peak_rss_mb_main_process`` is the flow's own process, without the
Prefect API server and parse workers). Rows/s per stage are the chunk count over each stage's wall
seconds in the run report (:data:`STAGES`: ``discover`` through ``commit``).
Then it runs the same flow again on the unchanged tree (``no_change_s``), opens the store with
``quarry.search.query`` and times warm hybrid queries (200 queries of 2-5 words from the same
vocabulary, k = 10; query embeddings computed before timing), and measures recall@10 of the
index's default vector search against exact search over the same rows, for those queries.
Query times are wall and CPU milliseconds (``hybrid_p50_cpu_ms``: what a query costs on an idle
core; on a shared, loaded machine the wall time adds the wait for one). With the ``hash``
embedder the vectors are feature hashes with no cluster structure, the worst case for IVF, so
``recall_at_10`` there is far below what real embeddings get (bench/ann_recall.py --rows).

Then the incremental rows (``run``), each in a child process as ``quarry serve`` runs them: the
store's private Prefect API server is started once, after the full run, and announced in
``<store>/prefect/server.json``, and each run is forked from a process that imported the flow
once (``quarry.flows.orchestration.warm_context``, started and warmed before the rows), so a run
pays its own work but neither a server's start nor an interpreter's imports (the full row's
``no_change_s`` keeps measuring a one-shot ``quarry index`` that pays both; ``--cold`` runs each
row in a new interpreter instead, as ``quarry serve`` ran them before).
Each row has its wall time, the bytes it wrote to the store (the sizes of files it created or rewrote: catalog, search index, LanceDB
fragments and manifests; not Prefect's own database and logs under ``prefect/`` and ``logs/``) and
the peak resident memory of its process tree:

- ``no_change``: the same tree again;
- ``edit_1`` / ``edit_100``: one / 100 files edited (a sentence appended to the last paragraph:
  one chunk of each changes);
- ``move_1000``: 1,000 files moved (a folder of them renamed: no byte changes, nothing to embed);
- ``after_50_commits``: 50 runs of one edited file each, in one child process (``--commits``),
  then the hybrid query latency of the store they leave, without a merge;
- ``after_maintain``: ``quarry maintain`` on that store, then the query latency again, and
  ``side_by_side``: the store before the merge (a hard-linked copy) and after it, queried in
  turn in one process, so that the ratio of their p50s does not carry the load of two moments.

Every row also has ``left_behind``: the processes its run left running (a detached builder of
DuckDB's full-text tables, as commits started before they were built on demand), waited for
before the next row starts (so no row's wall carries an earlier row's work), with their CPU
seconds (reaped: the bench makes itself their subreaper) and the peak of their summed memory.
The full-text tables themselves are measured as a SQL user meets them (``fts_*``): after the
no-change run, and after ``edit_1`` (finding the edited word), a ``match_bm25`` query through
``quarry sql``'s library call in a child process, whose first call builds them
(``fts_build_s``, ``fts_build_cpu_s``, ``fts_build_peak_mb`` from the build's own record) and a
second that reads them.

The ``full`` row keeps the keys it always had. Edited and moved files are put back as they were at
the end, so the cached tree stays the tree its parameters name.

``--embedder onnx-int8 --sample 2000`` runs the real default model on a 2,000-chunk tree and
adds ``extrapolated_wall_s`` for ``--chunks`` chunks (the hash row's non-embedding stages plus
the model's measured seconds per chunk, times the chunk count): labelled, never measured.

    python bench/scale.py [--chunks 1000000] [--embedder hash|onnx-int8] [--sample N] [--commits 50]
                          [--only-full] [--keep] [--reuse] [--json]

``--keep`` keeps the store; ``--reuse`` then measures the incremental rows again on it without
the full run (one unmeasured run first syncs it with the tree), keeping the full row on record.

Prints a table (stderr with --json) and writes bench/results/scale.json (rows are merged in by
chunks, embedder and run, so a 1M hash row and a model sample row can be run separately).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, ROOT, load_avg, log, machine, write_json

os.environ.setdefault("LANCEDB_LOG", "error")
WORK = RESULTS / "scale"
CHUNKS_PER_FILE = 20
TREE_FORMAT = 2
DIM = 384
CODES = ["FY2018", "E11000", "v1.4.4", "Q2", "HTTP 503", "ISO-8601", "RFC 7231", "x86_64", "utf-8"]
RUNS = ("full", "no_change", "edit_1", "edit_100", "move_1000", "after_50_commits", "after_maintain")
STAGES = ("discover", "plan", "parse", "section", "context", "chunk", "embed", "load", "commit")


def stage_seconds(report: dict) -> dict[str, float]:
    """Wall seconds per stage of a run report (``durations`` maps a stage to its ``seconds``)."""
    out = {}
    for stage, value in report.get("durations", {}).items():
        seconds = value.get("seconds") if isinstance(value, dict) else value
        if seconds is not None:
            out[stage] = float(seconds)
    return out


# --- the synthetic tree --------------------------------------------------------------------------


def vocabulary(size: int = 30_000, seed: int = 1) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    onsets = [
        "",
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "k",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "st",
        "tr",
        "pl",
        "ch",
        "sh",
        "gr",
        "br",
    ]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck"]
    words: dict[str, None] = {}
    while len(words) < size:
        n = int(rng.integers(1, 4))
        w = "".join(
            onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] + codas[rng.integers(len(codas))]
            for _ in range(n)
        )
        if len(w) >= 2:
            words[w] = None
    return sorted(words, key=len)  # frequent words short, as in English


def zipf_words(rng, words: list[str], count: int):
    import numpy as np

    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    p = ranks**-1.1
    return rng.choice(len(words), size=count, p=p / p.sum())


def make_tree(chunks: int, seed: int = 7) -> Path:
    """The cached synthetic tree for ``chunks`` chunks (built on first use)."""
    import numpy as np

    tree = WORK / f"tree-{chunks}"
    marker = tree / ".tree.json"
    params = {"format": TREE_FORMAT, "chunks": chunks, "per_file": CHUNKS_PER_FILE, "seed": seed}
    if marker.exists() and json.loads(marker.read_text()) == params:
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    t0 = time.perf_counter()
    words = np.array(vocabulary(), dtype=object)
    rng = np.random.default_rng(seed)
    n_files = max(1, chunks // CHUNKS_PER_FILE)
    per_para = 150  # words: ~630 characters (frequent words are short), one chunk each
    for f in range(n_files):
        idx = zipf_words(rng, words, CHUNKS_PER_FILE * (per_para + 4) + 6)
        w = words[idx]
        parts = [f"# {' '.join(w[:6]).capitalize()}\n"]
        pos = 6
        for _ in range(CHUNKS_PER_FILE):
            heading = " ".join(w[pos : pos + 4]).capitalize()
            body = w[pos + 4 : pos + 4 + per_para].tolist()
            pos += per_para + 4
            for i in range(14, len(body), 15):  # sentences of 15 words
                body[i] += "."
            if rng.random() < 0.05:
                body.insert(int(rng.integers(len(body))), CODES[int(rng.integers(len(CODES)))])
            parts.append(f"\n## {heading}\n\n{' '.join(body).capitalize()}.\n")
        folder = tree / f"part{f // 1000:04d}"
        if f % 1000 == 0:
            folder.mkdir(exist_ok=True)
        (folder / f"doc{f:07d}.md").write_text("".join(parts), encoding="utf-8")
        if f and f % 10000 == 0:
            log(f"  tree: {f}/{n_files} files ({time.perf_counter() - t0:.0f} s)")
    marker.write_text(json.dumps(params))
    log(f"  tree of {n_files} files written in {time.perf_counter() - t0:.0f} s")
    return tree


def make_queries(n: int, seed: int = 3) -> list[str]:
    import numpy as np

    words = vocabulary()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        if i % 10 == 0:
            out.append(CODES[i // 10 % len(CODES)])
        else:
            # Mid-frequency words, as people type them: not the commonest, not hapaxes.
            out.append(" ".join(words[int(j)] for j in rng.integers(20, 3000, size=int(rng.integers(2, 6)))))
    return out


# --- a run in a child process, with its memory sampled -------------------------------------------

CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])  # bench/, for scale.child_work
import scale
args = json.loads(sys.argv[2])
t, c = time.perf_counter(), time.process_time()
report = scale.child_work(args)
report["wall_in_child_s"] = time.perf_counter() - t
children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the Prefect API server, parse workers
report["cpu_in_child_s"] = time.process_time() - c + children.ru_utime + children.ru_stime
json.dump(report, open(args["out"], "w"), default=str)
"""


def child_work(args: dict) -> dict:
    """What a child process runs: ``index`` (``quarry.index()``, what ``quarry index`` runs: the
    flow under its Prefect API), ``commits`` (``args["files"]`` edited one at a time, an index run
    after each) or ``maintain`` (``quarry maintain``'s library call)."""
    from pathlib import Path

    import quarry

    store = Path(args["store"])
    if args["mode"] == "sql":  # quarry sql's library call: builds the full-text tables when missing
        with quarry.open(str(store)) as idx:
            t = time.perf_counter()
            rows = idx.sql(args["query"]).rows
            return {"rows": [[str(v) for v in r] for r in rows[:10]], "query_s": time.perf_counter() - t}
    if args["mode"] == "maintain":
        from quarry.store.maintain import maintain

        return maintain(store)
    if args["mode"] == "commits":
        walls = []
        for i, name in enumerate(args["files"]):
            edit_file(Path(name), f"c{i}")
            t = time.perf_counter()
            quarry.index([args["tree"]], store, **args["overrides"])
            walls.append(round(time.perf_counter() - t, 3))
        return {"commit_wall_s": walls}
    report = quarry.index([args["tree"]], store, **args["overrides"])
    return report if isinstance(report, dict) else {}


def edit_file(path: Path, tag: str) -> None:
    """Append a sentence to the file's last paragraph: its last chunk changes, the others do not."""
    text = path.read_text(encoding="utf-8")
    path.write_text(text.rstrip("\n") + f" Revised {tag} quillotrax{tag}.\n", encoding="utf-8")


def store_files(store: Path) -> dict[str, tuple[int, int, int]]:
    """(inode, mtime ns, size) of every file of the store but Prefect's database and logs and
    DuckDB's full-text tables (built on demand, measured apart: :func:`measure_full_text`)."""
    out = {}
    for folder, dirs, files in os.walk(store):
        if Path(folder) == store:
            dirs[:] = [d for d in dirs if d not in ("prefect", "logs")]
        for name in files:
            if name.startswith("fts-") or name == "fts.lock":
                continue
            try:
                st = os.stat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            out[os.path.join(folder, name)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def bytes_written(before: dict, after: dict) -> int:
    """Bytes of the files created or rewritten between two :func:`store_files` listings."""
    return sum(size for path, (ino, mtime, size) in after.items() if before.get(path, (None, None))[:2] != (ino, mtime))


def _tree_rss(root_pid: int, skip: set[int] = frozenset()) -> dict[int, int]:
    """Resident bytes of ``root_pid`` and each of its descendants (from /proc), by pid; the
    processes in ``skip`` and theirs left out."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            ppid, pages = int(fields[1]), int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * page
    out, todo = {}, [root_pid]
    while todo:
        pid = todo.pop()
        if pid in skip:
            continue
        out[pid] = rss.get(pid, 0)
        todo += children.get(pid, [])
    return out


def become_subreaper() -> bool:
    """Make this process the one orphans of its descendants are handed to (Linux's
    PR_SET_CHILD_SUBREAPER), so that a process a run leaves behind (a builder it detached) stays
    in view and its CPU time comes back when it is reaped (:func:`left_behind`)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


SUBREAPER = False


def left_behind(known: set[int], timeout: float = 7200.0) -> dict:
    """Wait until no process a run left behind runs (the descendants of this process not in
    ``known``, its own run's process included there) and DuckDB's full-text builders of the store
    are done; their count, CPU seconds (from the reaped processes' resource usage: theirs and their
    children's), the peak of their summed resident memory, and how long the store took to be idle.
    Without :func:`become_subreaper` a detached process is invisible: ``subreaper`` says which."""
    me = os.getpid()
    t0 = time.perf_counter()
    seen: set[int] = set()
    cpu, peak, peak_own = 0.0, 0, 0
    while time.perf_counter() - t0 < timeout:
        tree = {pid: rss for pid, rss in _tree_rss(me, known).items() if pid != me}
        seen |= set(tree)
        peak = max(peak, sum(tree.values()))
        for pid in list(tree):
            try:
                done, _status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:  # not a child of ours: its parent reaps it
                continue
            if done:
                cpu += usage.ru_utime + usage.ru_stime
                peak_own = max(peak_own, usage.ru_maxrss * 1024)
                tree.pop(pid)
        if not tree:
            break
        time.sleep(0.2)
    return {
        "processes": len(seen),
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(max(peak, peak_own) / 2**20),
        "idle_after_s": round(time.perf_counter() - t0, 2),
        "subreaper": SUBREAPER,
    }


CHILD_ENV = {"PREFECT_LOGGING_LEVEL": "WARNING", "LANCEDB_LOG": "error", "TOKENIZERS_PARALLELISM": "false"}
WARM = None  # the warm fork context of warm_server(), unless --cold
COLD = False


def forked_child(args: dict, errlog: str) -> None:
    """What a run forked from the warm process does (the ``CHILD`` script's work, in a fork)."""
    import resource

    fd = os.open(errlog, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.environ.update(CHILD_ENV)
    t, c = time.perf_counter(), time.process_time()
    report = child_work(args)
    report["wall_in_child_s"] = time.perf_counter() - t
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    report["cpu_in_child_s"] = time.process_time() - c + children.ru_utime + children.ru_stime
    with open(args["out"], "w") as fh:
        json.dump(report, fh, default=str)


def run_flow(tree: Path, store: Path, overrides: dict, out: Path, mode: str = "index", **extra) -> dict:
    """Run :func:`child_work` in a child process (forked from :data:`WARM` when set, else a new
    interpreter), sampling the memory of its process tree; the child's report plus ``wall_s``,
    ``bytes_written`` and the peak RSS figures."""
    env = {**os.environ, **CHILD_ENV}
    errlog = out.with_suffix(".log")
    args = {"mode": mode, "tree": str(tree), "store": str(store), "overrides": overrides, "out": str(out), **extra}
    before = store_files(store) if store.exists() else {}
    committed = _generation(store)
    known = set(_tree_rss(os.getpid())) - {os.getpid()}  # the Prefect API server, the warm fork server
    t0, epoch0 = time.perf_counter(), time.time()
    with open(errlog, "w") as err_fh:  # a file, not a pipe: a full pipe would stall the run
        if WARM is not None:
            import scale  # by its module name, so that a fork finds the function

            proc = WARM.Process(target=scale.forked_child, args=(args, str(errlog)))
            proc.start()
            alive = proc.is_alive
            wait = proc.join
        else:
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(ROOT / "bench"), json.dumps(args)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err_fh,
                text=True,
            )
            alive = lambda: proc.poll() is None  # noqa: E731

            def wait(seconds: float) -> None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(seconds)

        peak, at, main_peak, series = 0, 0.0, 0, []
        while alive():
            by_pid = _tree_rss(proc.pid)
            total = sum(by_pid.values())
            main_peak = max(main_peak, by_pid.get(proc.pid, 0))
            series.append((time.perf_counter() - t0, total))
            if total > peak:
                peak, at = total, time.perf_counter() - t0
            wait(0.2)  # the next sample in 0.2 s, or at once when the run ends (its wall is not rounded up)
    wall = time.perf_counter() - t0
    left = left_behind(known | {proc.pid})  # before anything else: the next row starts on an idle store
    err = errlog.read_text(errors="replace")
    code = proc.exitcode if WARM is not None else proc.returncode
    if code != 0:
        sys.exit(f"the {mode} run failed (exit {code}):\n{err[-3000:]}")
    report = json.loads(out.read_text())
    report["wall_s"] = wall
    report["left_behind"] = left
    report["bytes_written"] = bytes_written(before, store_files(store))
    report["peak_rss_mb"] = round(peak / 2**20)
    # Where the peak falls: the commit's stage ends when the run row is stamped (``finished``), so
    # it began commit_s before that; what follows (LanceDB compaction, shutdown) counts as commit.
    commit_from = _epoch(report.get("finished")) - epoch0 - stage_seconds(report).get("commit", 0.0)
    if commit_from != commit_from:  # no finished time: the commit is the run's last commit_s seconds
        commit_from = wall - stage_seconds(report).get("commit", 0.0) - 1.0
    if _generation(store) != committed:  # a new generation: its full-text tables follow it
        report.update(wait_full_text(store))
    report["peak_rss_at_s"] = round(at, 1)
    report["peak_rss_mb_main_process"] = round(main_peak / 2**20)
    report["peak_rss_mb_batches"] = round(max((r for t, r in series if t < commit_from), default=0) / 2**20)
    report["peak_rss_mb_commit"] = round(max((r for t, r in series if t >= commit_from), default=0) / 2**20)
    return report


def _generation(store: Path) -> int | None:
    from quarry.store.pointer import read_pointer

    pointer = read_pointer(store) if store.exists() else None
    return pointer.generation if pointer else None


def wait_full_text(store: Path) -> dict:
    """After a run: wait for any builder of DuckDB's full-text tables at work on the store (no
    commit starts one any more; a quarry before did, after every commit that changed a chunk);
    its build seconds, how long the run's end waited for it, its size."""
    from quarry.store import fts
    from quarry.store.pointer import read_pointer

    pointer = read_pointer(store)
    if pointer is None:
        return {}
    t = time.perf_counter()
    state = fts.wait(store, pointer.generation, timeout=3600)
    info = fts.build_info(store, pointer.generation) or {}
    built_now = info.get("generation") == pointer.generation
    out = {
        "fts_state": state,
        "fts_wait_s": round(time.perf_counter() - t, 2),
        "fts_build_s": round(info["seconds"], 2) if info and built_now else (0.0 if info else None),
        "fts_bytes": fts.path(store, pointer.generation).stat().st_size if info else 0,
    }
    log(f"  full-text tables: {state}, built in {out['fts_build_s']} s (waited {out['fts_wait_s']} s after the run)")
    return out


FTS_SQL = (
    "SELECT d.rel_path, fts_main_chunks.match_bm25(c.chunk_id, ?) AS score FROM chunks c "
    "JOIN documents d USING (doc_id) WHERE score IS NOT NULL ORDER BY score DESC LIMIT 10"
)


def measure_full_text(tree: Path, store: Path, overrides: dict, folder: Path, words: str, name: str) -> dict:
    """``quarry sql`` with ``match_bm25`` on the current generation, in a child process as a user
    runs it: the first query builds DuckDB's full-text tables (none is built by a commit), a second
    reads them. The build's own cost is its ``build`` row (quarry/store/fts.py). Nothing when
    ``QUARRY_DUCKDB_FTS=0``."""
    from quarry.core.settings import Settings
    from quarry.store import fts

    if not Settings.from_env().duckdb_fts or not fts.available():
        return {}
    query = FTS_SQL.replace("?", "'" + words.replace("'", "''") + "'")
    log(f"  full text: match_bm25 '{words}' (load {load_avg()}) ...")
    first = run_flow(tree, store, overrides, folder / f"{name}.json", mode="sql", query=query)
    second = run_flow(tree, store, overrides, folder / f"{name}-again.json", mode="sql", query=query)
    gen = _generation(store)
    info = fts.build_info(store, gen) or {}
    out = {
        "fts_query_s": round(first["wall_s"], 2),
        "fts_query_cpu_s": round(first.get("cpu_in_child_s", 0.0), 2),
        "fts_query_peak_rss_mb": first["peak_rss_mb"],
        "fts_query_again_s": round(second["wall_s"], 2),
        "fts_top": [r[0] for r in first.get("rows", [])][:3],
        "fts_build_s": round(info.get("seconds", 0.0), 2),
        "fts_build_cpu_s": round(info.get("cpu_seconds", 0.0), 2),
        "fts_build_peak_mb": info.get("peak_rss_mb"),
        "fts_bytes": fts.path(store, gen).stat().st_size,
        "fts_limits": {"memory_mb": info.get("memory_limit_mb"), "threads": info.get("threads")},
    }
    log(
        f"  full text: first query {out['fts_query_s']} s (build {out['fts_build_s']} s, {out['fts_build_cpu_s']} s "
        f"CPU, peak {out['fts_build_peak_mb']} MB), again {out['fts_query_again_s']} s; top {out['fts_top']}"
    )
    return out


def _epoch(stamp) -> float:
    """Epoch seconds of a run report's UTC time stamp; NaN when there is none."""
    import datetime as dt

    if not stamp:
        return float("nan")
    return dt.datetime.fromisoformat(str(stamp).replace("Z", "")).replace(tzinfo=dt.UTC).timestamp()


# --- queries -------------------------------------------------------------------------------------


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return round(statistics.median(ordered), 2), round(
        ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))], 2
    )


def _query_setup(embedder: str, n_queries: int):
    from quarry.core.settings import Settings
    from quarry.ingest.embedders import get_embedder

    settings = Settings.from_env(embed_backend=embedder, **({"embed_dim": DIM} if embedder == "hash" else {}))
    queries = make_queries(n_queries)
    return settings, queries, get_embedder(settings).embed(queries)


def _warm(idx, queries: list[str], qvecs) -> None:
    """Query embeddings put in the index's cache (they are not what is timed), then 20 queries."""
    for q, v in zip(queries, qvecs):
        idx._query_cache.put(q, v)
    for q in queries[:20]:
        idx.search(q, k=10, mode="hybrid")


def measure_side_by_side(stores: list[Path], embedder: str, n_queries: int) -> list[dict]:
    """Hybrid query latency of several stores in one process, query by query in turn (the order
    reversed every other query), so that a load that comes and goes weighs on each alike."""
    import quarry.search.query

    settings, queries, qvecs = _query_setup(embedder, n_queries)
    indexes = []
    for store in stores:
        idx = quarry.search.query.open(store, settings)
        _warm(idx, queries, qvecs)
        indexes.append(idx)
    wall: list[list[float]] = [[] for _ in stores]
    cpu: list[list[float]] = [[] for _ in stores]
    for i, q in enumerate(queries):
        order = list(range(len(indexes)))
        for j in order if i % 2 == 0 else order[::-1]:
            t, c = time.perf_counter(), time.process_time()
            indexes[j].search(q, k=10, mode="hybrid")
            wall[j].append((time.perf_counter() - t) * 1000)
            cpu[j].append((time.process_time() - c) * 1000)
    out = []
    for idx, w, c in zip(indexes, wall, cpu):
        (p50, p95), (c50, c95) = percentiles(w), percentiles(c)
        out.append(
            {
                "hybrid_p50_ms": p50,
                "hybrid_p95_ms": p95,
                "hybrid_p50_cpu_ms": c50,
                "hybrid_p95_cpu_ms": c95,
                "segments": len(idx.snapshot.index.manifest.get("segments") or []) or 1,
                "queries": len(queries),
            }
        )
        idx.close()
    return out


def measure_queries(store: Path, embedder: str, n_queries: int, recall: bool = True) -> dict:
    import numpy as np

    import quarry.search.query

    settings, queries, qvecs = _query_setup(embedder, n_queries)
    t = time.perf_counter()
    idx = quarry.search.query.open(store, settings)
    open_ms = (time.perf_counter() - t) * 1000
    _warm(idx, queries, qvecs)
    samples, cpu = [], []
    for q in queries:
        t, c = time.perf_counter(), time.process_time()
        idx.search(q, k=10, mode="hybrid")
        samples.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    p50, p95 = percentiles(samples)
    c50, c95 = percentiles(cpu)  # what a query costs on an idle core (see bench/query_latency.py)
    out = {
        "hybrid_p50_ms": p50,
        "hybrid_p95_ms": p95,
        "hybrid_p50_cpu_ms": c50,
        "hybrid_p95_cpu_ms": c95,
        "open_ms": round(open_ms, 1),
        "queries": len(queries),
    }
    index = idx.snapshot.index
    if recall:
        hits = []
        for v in qvecs:
            want, _ = index.dense.search(v, 10, method="exact")
            got, _ = index.dense.search(v, 10, method="auto")
            hits.append(len(set(want.tolist()) & set(got.tolist())) / max(1, len(want)))
        out["recall_at_10"] = round(float(np.mean(hits)), 4)
        out["vector_index"] = _vector_index(index)
    idx.close()
    return out


def _vector_index(index) -> str:
    dense = index.manifest.get("dense") or {}
    for key in ("hnsw", "ivf"):
        if dense.get(key):
            return f"{key} {json.dumps(dense[key], sort_keys=True)}"
    return "exact"


# --- one row -------------------------------------------------------------------------------------


def run_row(
    chunks: int,
    embedder: str,
    runner: str,
    n_queries: int,
    keep: bool,
    commits: int = 50,
    only_full: bool = False,
    reuse: bool | set[str] = False,
) -> list[dict]:
    tree = make_tree(chunks)
    folder = WORK / f"store-{chunks}-{embedder}"
    if reuse:
        return reuse_row(
            tree, folder, chunks, embedder, runner, n_queries, commits, reuse if isinstance(reuse, set) else None
        )
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    store = folder / "store"
    overrides = {"embed_backend": embedder, **({"embed_dim": DIM} if embedder == "hash" else {})}
    if runner != "default":
        overrides["runner"] = runner
    log(f"indexing {chunks} chunks ({embedder}, load {load_avg()}) ...")
    first = run_flow(tree, store, overrides, folder / "run1.json")
    log(
        f"  {first['chunks']} chunks in {first['wall_s']:.0f} s, peak RSS {first['peak_rss_mb']} MB, "
        f"{first['bytes_written'] / 2**20:.0f} MB written; "
        f"stages {', '.join(f'{k} {v:.1f} s' for k, v in stage_seconds(first).items())}"
    )
    log(f"re-indexing the unchanged tree (load {load_avg()}) ...")
    second = run_flow(tree, store, overrides, folder / "run2.json")
    log(
        f"  no-change run {second['wall_s']:.1f} s, {second['bytes_written'] / 2**20:.1f} MB written; "
        f"stages {', '.join(f'{k} {v:.1f} s' for k, v in stage_seconds(second).items())}"
    )
    full_text = measure_full_text(tree, store, overrides, folder, "quillotrax FY2018", "fts_full")
    log(f"querying (load {load_avg()}) ...")
    queries = measure_queries(store, embedder, n_queries)
    n = first["chunks"]
    stages, stages2 = stage_seconds(first), stage_seconds(second)
    base = {"chunks": n, "embedder": embedder, "runner": runner, "synthetic": True}
    full = {
        "run": "full",
        "chunks": n,
        "files": first.get("added"),
        "runner": runner,
        "embedder": embedder,
        "wall_s": round(first["wall_s"], 1),
        "bytes_written": first["bytes_written"],
        "cpu_s": round(first.get("cpu_in_child_s", 0.0), 1),
        "peak_rss_mb": first["peak_rss_mb"],
        "peak_rss_mb_batches": first["peak_rss_mb_batches"],
        "peak_rss_mb_commit": first["peak_rss_mb_commit"],
        "peak_rss_mb_main_process": first["peak_rss_mb_main_process"],
        "rows_per_s": {s: round(n / stages[s]) for s in STAGES if stages.get(s)},
        "stage_s": {k: round(v, 1) for k, v in stages.items()},
        "commit_s": round(stages.get("commit", 0.0), 1),
        "left_behind": first.get("left_behind"),
        **full_text,
        "no_change_s": round(second["wall_s"], 1),
        "no_change_peak_rss_mb": second["peak_rss_mb"],
        # the no-change run inside its process, Prefect API server start included (the rest of
        # no_change_s is starting Python and importing quarry, Prefect and friends)
        "no_change_in_process_s": round(second.get("wall_in_child_s", 0.0), 1),
        "no_change_stage_s": {k: round(v, 2) for k, v in stages2.items()},
        **queries,
        "load_avg": load_avg(),
        "machine": machine(),
        "synthetic": True,
    }
    rows = [full]
    if only_full:
        return _finish(rows + [_incremental("no_change", base, second)], folder, keep)
    with warm_server(store):
        _incrementals(rows, tree, store, overrides, folder, base, embedder, n_queries, commits)
    return _finish(rows, folder, keep)


def reuse_row(
    tree: Path,
    folder: Path,
    chunks: int,
    embedder: str,
    runner: str,
    n_queries: int,
    commits: int,
    only: set[str] | None = None,
) -> list[dict]:
    """The incremental rows only, on the store an earlier ``--keep`` run left (the full run's row
    is kept from that run): one unmeasured run first brings the store back to the tree (the
    earlier run's edits were put back in the tree, not in the store)."""
    store = folder / "store"
    if not (store / "CURRENT").exists():
        sys.exit(f"--reuse: no kept store at {store} (run once with --keep)")
    overrides = {"embed_backend": embedder, **({"embed_dim": DIM} if embedder == "hash" else {})}
    if runner != "default":
        overrides["runner"] = runner
    first = folder / "run1.json"  # the kept full run's own count, so the rows sit beside its row
    n = json.loads(first.read_text()).get("chunks", chunks) if first.exists() else chunks
    base = {"chunks": n, "embedder": embedder, "runner": runner, "synthetic": True}
    rows: list[dict] = []
    with warm_server(store):
        log(f"reusing {store}: bringing it back to the tree (not measured; load {load_avg()}) ...")
        run_flow(tree, store, overrides, folder / "settle.json")
        wait_full_text(store)
        _incrementals(rows, tree, store, overrides, folder, base, embedder, n_queries, commits, only)
    return rows


@contextlib.contextmanager
def warm_server(store: Path):
    """The store's private Prefect API server, running and announced as ``quarry serve`` keeps it,
    and (unless ``--cold``) the warm process ``quarry serve`` forks its runs from, started and
    warmed before any row is measured (a served store's first run pays that once)."""
    global WARM
    from quarry.flows.orchestration import SERVER_FILE, prefect_api, warm_context

    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL",)}
    with prefect_api(
        store / "logs", database=store / "prefect" / "prefect.db", announce=store / "prefect" / SERVER_FILE
    ):
        os.environ.pop("PREFECT_API_URL", None)  # children find the announced server, as under quarry serve
        if not COLD:
            WARM = warm_context()
            primer = WARM.Process(target=int)
            primer.start()
            primer.join()
        try:
            yield
        finally:
            WARM = None
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _incrementals(
    rows, tree, store, overrides, folder, base, embedder, n_queries, commits, only: set[str] | None = None
) -> None:
    """The incremental rows (``only``: those of :data:`RUNS` to measure; default all)."""
    want = lambda name: only is None or name in only  # noqa: E731
    if want("no_change"):
        log(f"no_change, warm server (load {load_avg()}) ...")
        rows.append(_incremental("no_change", base, run_flow(tree, store, overrides, folder / "no_change.json")))
    files = sorted(tree.rglob("doc*.md"))
    originals: dict[Path, bytes] = {}
    moved: tuple[Path, Path] | None = None
    try:
        for name, count in (("edit_1", 1), ("edit_100", 100)):
            if not want(name):
                continue
            picked = files[:: max(1, len(files) // count)][:count]
            for path in picked:
                originals.setdefault(path, path.read_bytes())
                edit_file(path, name)
            log(f"{name}: {len(picked)} files edited (load {load_avg()}) ...")
            report = run_flow(tree, store, overrides, folder / f"{name}.json")
            row = _incremental(name, base, report)
            if name == "edit_1":  # outside the row's wall: the query a SQL user runs after the edit
                row.update(
                    measure_full_text(
                        tree, store, overrides, folder, f"quillotrax{name.replace('_', '')}", "fts_edit_1"
                    )
                )
                row["fts_found_edit"] = any(r == picked[0].relative_to(tree).as_posix() for r in row.get("fts_top", []))
            rows.append(row)
        if not (want("move_1000") or want("after_50_commits") or want("after_maintain")):
            return
        folders = sorted(p for p in tree.iterdir() if p.is_dir())
        source = next((f for f in folders if len(list(f.glob("doc*.md"))) >= 1000), folders[0])
        moved = (source, source.with_name(source.name + "-moved"))
        if not want("move_1000"):
            moved = None
        else:
            os.rename(*moved)
            log(f"move_1000: {len(list(moved[1].glob('doc*.md')))} files moved (load {load_avg()}) ...")
            report = run_flow(tree, store, overrides, folder / "move_1000.json")
            rows.append(_incremental("move_1000", base, report))
            os.rename(moved[1], moved[0])
            moved = None
        if not (want("after_50_commits") or want("after_maintain")):
            return
        files = sorted(tree.rglob("doc*.md"))
        picked = files[len(files) // 3 :: max(1, len(files) // (3 * commits))][:commits]
        for path in picked:
            originals.setdefault(path, path.read_bytes())
        log(f"after_50_commits: {commits} runs of one edited file each (load {load_avg()}) ...")
        report = run_flow(
            tree, store, overrides, folder / "commits.json", mode="commits", files=[str(p) for p in picked]
        )
        walls = report.get("commit_wall_s", [])
        row = _incremental("after_50_commits", base, report)
        row.update(
            {
                "commits": len(walls),
                "per_commit_wall_s": {"p50": percentiles(walls)[0], "max": max(walls)} if walls else {},
            }
        )
        row.update(measure_queries(store, embedder, n_queries, recall=False))
        rows.append(row)
        if not want("after_maintain"):
            return
        # a copy of the unmerged store (hard links: its files are never rewritten in place), to
        # time its queries beside the merged store's in one process after the merge
        unmerged = folder / "store-unmerged"
        shutil.rmtree(unmerged, ignore_errors=True)
        subprocess.run(["cp", "-al", str(store), str(unmerged)], check=True)
        log(f"after_maintain: quarry maintain (load {load_avg()}) ...")
        report = run_flow(tree, store, overrides, folder / "maintain.json", mode="maintain")
        row = _incremental("after_maintain", base, report)
        row.update(measure_queries(store, embedder, n_queries, recall=False))
        before, after = measure_side_by_side([unmerged, store], embedder, n_queries)
        shutil.rmtree(unmerged, ignore_errors=True)
        row["side_by_side"] = {
            "after_50_commits": before,
            "after_maintain": after,
            "p50_ratio": round(before["hybrid_p50_ms"] / after["hybrid_p50_ms"], 2),
            "p50_cpu_ratio": round(before["hybrid_p50_cpu_ms"] / after["hybrid_p50_cpu_ms"], 2),
            "load_avg": load_avg(),
        }
        log(
            f"  side by side, hybrid p50 after {len(walls)} commits / after maintain: {before['hybrid_p50_ms']} / "
            f"{after['hybrid_p50_ms']} ms ({row['side_by_side']['p50_ratio']}x; CPU "
            f"{row['side_by_side']['p50_cpu_ratio']}x)"
        )
        rows.append(row)
    finally:
        if moved is not None and moved[1].exists():
            os.rename(moved[1], moved[0])
        for path, data in originals.items():
            path.write_bytes(data)


def _incremental(name: str, base: dict, report: dict) -> dict:
    """A row for one incremental run: what the issue asks of each, and the run's own counters."""
    row = {
        "run": name,
        **base,
        "wall_s": round(report["wall_s"], 2),
        "bytes_written": report["bytes_written"],
        "peak_rss_mb": report["peak_rss_mb"],
        "in_process_s": round(report.get("wall_in_child_s", 0.0), 2),
        "cpu_s": round(report.get("cpu_in_child_s", 0.0), 2),
        "load_avg": load_avg(),
        "process": "forked" if WARM is not None else "new interpreter",
    }
    for key in ("added", "updated", "moved", "deleted", "embedded_chunks", "left_behind"):
        if key in report:
            row[key] = report[key]
    if report.get("durations"):
        row["stage_s"] = {k: round(v, 2) for k, v in stage_seconds(report).items()}
    left = report.get("left_behind") or {}
    log(
        f"  {name}: {row['wall_s']} s, {row['bytes_written'] / 2**20:.1f} MB written, peak {row['peak_rss_mb']} MB; "
        f"left behind: {left.get('processes')} processes, {left.get('cpu_s')} s CPU, peak {left.get('peak_rss_mb')} MB"
    )
    return row


def _finish(rows: list[dict], folder: Path, keep: bool) -> list[dict]:
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1_000_000, help="chunks in the synthetic tree")
    ap.add_argument(
        "--embedder",
        default="hash",
        choices=["hash", "onnx-int8"],
        help="hash: the pipeline cost; onnx-int8: the real default model (use --sample)",
    )
    ap.add_argument(
        "--sample", type=int, default=0, help="run the model on this many chunks and extrapolate to --chunks (labelled)"
    )
    ap.add_argument("--runner", default="default", help="the flow's task runner (a Settings field when not default)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--commits", type=int, default=50, help="small commits before after_50_commits is measured")
    ap.add_argument("--only-full", action="store_true", help="only the full and no-change runs")
    ap.add_argument("--keep", action="store_true", help="keep the store under bench/results/scale/")
    ap.add_argument("--reuse", action="store_true", help="only the incremental rows, on the store a --keep run kept")
    ap.add_argument("--rows", default="", help="with --reuse: the rows to measure, comma-separated (default all)")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="each incremental row in a new interpreter, not forked from a warm process as quarry serve runs it",
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    args = ap.parse_args()
    global COLD, SUBREAPER
    COLD = args.cold
    SUBREAPER = become_subreaper()
    size = args.sample or args.chunks
    rows = run_row(
        size,
        args.embedder,
        args.runner,
        args.queries,
        args.keep,
        args.commits,
        only_full=args.only_full or bool(args.sample),
        reuse=(set(args.rows.split(",")) if args.rows else True) if args.reuse else False,
    )
    row = rows[0]
    path = RESULTS / "scale.json"
    old = json.loads(path.read_text())["results"] if path.exists() else []
    if args.sample:
        row["sample_of"] = args.chunks
        per_chunk = row["stage_s"].get("embed", 0.0) / max(1, row["chunks"])
        hashed = [r for r in old if r["embedder"] == "hash" and r.get("run", "full") == "full"]
        base = max(hashed, key=lambda r: r["chunks"]) if hashed else None
        if base:
            scale = args.chunks / base["chunks"]
            rest = (base["wall_s"] - base["stage_s"].get("embed", 0.0)) * scale
            row["extrapolated_wall_s"] = round(rest + per_chunk * args.chunks, 0)
            row["extrapolated_note"] = (
                f"extrapolated, not measured: the {base['chunks']}-chunk hash run's time "
                f"outside embedding x {scale:g} (linear) + {per_chunk * 1000:.2f} ms/chunk "
                f"of model time x {args.chunks}"
            )
        row["model_ms_per_chunk"] = round(per_chunk * 1000, 3)
    key = lambda r: (r["chunks"], r["embedder"], r.get("run", "full"))  # noqa: E731
    new_keys = {key(r) for r in rows}
    results = [r for r in old if key(r) not in new_keys] + rows
    order = {name: i for i, name in enumerate(RUNS)}
    results.sort(key=lambda r: (r["embedder"], r["chunks"], order.get(r.get("run", "full"), 99)))
    out = {"results": results}
    write_json(path, out)
    lines = [
        f"{'chunks':>8} {'embedder':<10} {'run':<17} {'wall s':>7} {'MB written':>10} {'peak MB':>8} "
        f"{'p50 ms':>7} {'p95 ms':>7}  notes"
    ]
    for r in results:
        notes = ""
        if r.get("run", "full") == "full":
            notes = (
                f"commit {r['commit_s']} s, no-change {r['no_change_s']} s, recall {r.get('recall_at_10')}; "
                + ", ".join(f"{k} {v}" for k, v in r["rows_per_s"].items())
            )
            if r.get("extrapolated_note"):
                notes += f"  [{r['extrapolated_note']}: {r['extrapolated_wall_s']} s]"
        elif "embedded_chunks" in r:
            notes = f"embedded {r['embedded_chunks']}, moved {r.get('moved', 0)}"
        left = r.get("left_behind") or {}
        if left:
            notes += (
                f"; left behind {left.get('processes')} proc, {left.get('cpu_s')} s CPU, {left.get('peak_rss_mb')} MB"
            )
        if r.get("fts_query_s") is not None:
            notes += (
                f"; match_bm25 first {r['fts_query_s']} s (build {r.get('fts_build_cpu_s')} s CPU, "
                f"{r.get('fts_build_peak_mb')} MB), again {r.get('fts_query_again_s')} s"
            )
        if r.get("per_commit_wall_s"):
            notes += f"{r['commits']} commits, per commit p50 {r['per_commit_wall_s']['p50']} s"
        written = f"{r['bytes_written'] / 2**20:.1f}" if r.get("bytes_written") is not None else "-"
        lines.append(
            f"{r['chunks']:>8} {r['embedder']:<10} {r.get('run', 'full'):<17} {r['wall_s']:>7} {written:>10} "
            f"{r['peak_rss_mb']:>8} {r.get('hybrid_p50_ms', '-'):>7} {r.get('hybrid_p95_ms', '-'):>7}  {notes}"
        )
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
