"""Where an index run's memory goes while batches load: the flow in this process, sampled by chunks loaded.

Runs ``quarry.index()`` on ``bench/scale.py``'s synthetic tree (``--chunks``, the
``hash`` embedder at 384 dimensions, a fresh store) in this process, and samples every 2 s: RSS,
pyarrow's pool, glibc's main arena (``mallinfo2``: in use and free), and ``tracemalloc``'s total
when tracing. At each of ``--snapshots`` (chunks loaded, counted in ``StoreWriter.write_documents``)
it also records DuckDB's ``duckdb_memory()``, the LanceDB table's fragments and version, the GC's
object count, the seconds spent so far in the writer's steps (LanceDB delete and add, Arrow rows,
catalog write), and dumps a ``tracemalloc`` snapshot (``snap<N>.tm``) when tracing.

``tracemalloc`` slows the run about tenfold; ``--trace-from N`` starts it at N chunks, so a
snapshot later holds only what was allocated since (what grew), and ``--exit-at`` ends the run
after that snapshot. Compare two snapshots with ``Snapshot.load(...).compare_to(..., "lineno")``.

    python bench/scale_memory.py [--chunks 200000] [--snapshots 40000,100000,160000,195000]
                                 [--trace-from 20000 --snapshots 30000,60000 --exit-at 60000]

Prints one JSON line per snapshot (stderr) and writes bench/results/scale_memory/samples.json.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import shutil
import sys
import threading
import time
import tracemalloc

from common import ROOT

os.environ.setdefault("LANCEDB_LOG", "error")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
OUT = ROOT / "bench" / "results" / "scale_memory"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=200_000)
    ap.add_argument("--snapshots", default="40000,100000,160000,195000", help="chunks loaded, comma-separated")
    ap.add_argument("--trace-from", type=int, default=-1, help="start tracemalloc at this many chunks (-1: never)")
    ap.add_argument("--frames", type=int, default=6, help="tracemalloc frames per allocation")
    ap.add_argument("--exit-at", type=int, default=0, help="stop the run after the snapshot at this many chunks")
    args = ap.parse_args()

    import pyarrow as pa
    from scale import DIM, make_tree

    from quarry.store import catalog, vectors, writer

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    page = os.sysconf("SC_PAGE_SIZE")
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    tree = make_tree(args.chunks)
    store = OUT / "store"
    state = {"chunks": 0, "snapshots": sorted(int(x) for x in args.snapshots.split(",") if x)}
    samples: list[dict] = []
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()

    def sample(tag: str = "") -> dict:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * page
        m = libc.mallinfo2()
        row = {
            "t": round(time.perf_counter() - t0, 1),
            "chunks": state["chunks"],
            "rss_mb": round(rss / 2**20, 1),
            "arrow_mb": round(pa.total_allocated_bytes() / 2**20, 1),
            "malloc_arena_mb": round(m.arena / 2**20, 1),
            "malloc_in_use_mb": round(m.uordblks / 2**20, 1),
            "malloc_free_mb": round(m.fordblks / 2**20, 1),
            "tag": tag,
        }
        if tracemalloc.is_tracing():
            row["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
        samples.append(row)
        return row

    def timed(module, name: str) -> None:
        fn = getattr(module, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds[f"{module.__name__.rsplit('.', 1)[-1]}.{name}"] = (
                    seconds.get(f"{module.__name__.rsplit('.', 1)[-1]}.{name}", 0.0) + time.perf_counter() - t
                )

        setattr(module, name, wrapper)

    for name in ("delete_documents", "add_rows", "rows_table"):
        timed(vectors, name)
    timed(catalog, "replace_documents")
    write_documents = writer.StoreWriter.write_documents

    def counting(self, records, vecs, run_id):
        write_documents(self, records, vecs, run_id)
        state["chunks"] += sum(len(r.chunks) for r in records)
        if 0 <= args.trace_from <= state["chunks"] and not tracemalloc.is_tracing():
            tracemalloc.start(args.frames)
        if not state["snapshots"] or state["chunks"] < state["snapshots"][0]:
            return
        at = state["snapshots"].pop(0)
        gc.collect()
        row = sample(f"snapshot {at}")
        row.update(
            gc_objects=len(gc.get_objects()),
            seconds={k: round(v, 1) for k, v in seconds.items()},
            lance_fragments=self.table.stats()["fragment_stats"]["num_fragments"],
            lance_version=self.table.version,
            duckdb_memory=dict(
                self.con.execute(
                    "SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0"
                ).fetchall()
            ),
        )
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(OUT / f"snap{at}.tm"))
        print(json.dumps(row), file=sys.stderr, flush=True)
        if args.exit_at and at >= args.exit_at:
            (OUT / "samples.json").write_text(json.dumps(samples))
            os._exit(0)

    writer.StoreWriter.write_documents = counting

    def sampler() -> None:
        while True:
            sample()
            time.sleep(2)

    threading.Thread(target=sampler, daemon=True).start()
    import quarry

    report = quarry.index([str(tree)], store, embed_backend="hash", embed_dim=DIM)
    sample("end")
    (OUT / "samples.json").write_text(json.dumps(samples))
    print(
        json.dumps(
            {
                "chunks": report.get("chunks"),
                "stage_s": {k: v["seconds"] for k, v in report.get("durations", {}).items()},
            }
        ),
        file=sys.stderr,
    )
    shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
