"""The same tree indexed with each task runner, side by side, through the CLI a user runs.

    python bench/runners.py [--tree DIR] [--runners threads,processes,dask] [--workers 2]
                            [--backend onnx-int8] [--json]

For each runner: ``quarry index TREE --db STORE --runner R --workers N --json`` in a fresh
process and a fresh store (``threads`` takes no ``--workers``: its batches run in the flow's
process), timed from outside; the stage times come from the run report. Then every store is
opened and compared with the first runner's: documents, chunks, and the top 10 of a few
hybrid queries (chunk ids) must be equal. The default tree is the Sourcegraph handbook's
engineering folder in ../shared/data (219 files), read in place.

Prints a table (stderr with --json) and writes bench/results/runners.json. Timings depend on
the machine's load: the load average is recorded with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED

TREE = SHARED / "trees" / "sourcegraph-handbook" / "content" / "departments" / "engineering"
QUERIES = [
    "on-call rotation and incident response",
    "code review guidelines",
    "how to deploy to production",
    "hiring process for engineers",
    "postmortem template",
]


def quarry_bin() -> str:
    return str(Path(sys.executable).with_name("quarry"))


def index_once(tree: Path, store: Path, runner: str, workers: int) -> dict:
    cmd = [quarry_bin(), "index", str(tree), "--db", str(store), "--runner", runner, "--json"]
    if runner != "threads":
        cmd += ["--workers", str(workers)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 3):  # 3: the run completed and reported failed files
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout)
    return {
        "runner": runner,
        "workers": workers if runner != "threads" else 1,
        "wall_s": round(wall, 2),
        "chunks": report["chunks"],
        "embedded": report["embedded_chunks"],
        "stages_s": {k: v["seconds"] for k, v in report["durations"].items()},
        "chunks_per_s": round(report["chunks"] / wall, 1) if wall else None,
    }


def fingerprint(store: Path) -> dict:
    import quarry

    with quarry.open(store) as idx:
        status = idx.status()
        tops = [[r.chunk_id for r in idx.search(q, k=10).results] for q in QUERIES]
    return {"documents": status["documents"], "chunks": status["chunks"], "tops": tops}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=TREE)
    ap.add_argument("--runners", default="threads,processes,dask")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backend", default=None, help="embedding backend (default: quarry's default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.tree.exists():
        sys.exit(f"tree not found: {args.tree}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.backend:
        os.environ["QUARRY_EMBED_BACKEND"] = args.backend
    work = Path(tempfile.mkdtemp(prefix="quarry-bench-runners-"))
    rows, prints = [], []
    try:
        for runner in args.runners.split(","):
            store = work / runner
            row = index_once(args.tree, store, runner, args.workers)
            prints.append(fingerprint(store))
            row["same_as_first"] = prints[-1] == prints[0]
            rows.append(row)
            print(f"{runner}: {row['wall_s']} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {
        "tree": str(args.tree),
        "files": sum(1 for p in args.tree.rglob("*") if p.is_file()),
        "backend": os.environ.get("QUARRY_EMBED_BACKEND", "default"),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "results": rows,
    }
    dest = ROOT / "bench" / "results" / "runners.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(payload, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(
        f"{payload['files']} files, backend {payload['backend']}, {payload['cpus']} CPUs, "
        f"load average {' '.join(map(str, payload['load_average']))}",
        file=out,
    )
    stages = sorted({s for r in rows for s in r["stages_s"]} - {"total"})
    print(
        f"{'runner':<10} {'workers':>7} {'wall s':>8} {'chunks':>7} {'chunks/s':>9} {'same':>5}  "
        + " ".join(f"{s:>9}" for s in stages),
        file=out,
    )
    for r in rows:
        print(
            f"{r['runner']:<10} {r['workers']:>7} {r['wall_s']:>8.1f} {r['chunks']:>7} {r['chunks_per_s']:>9} "
            f"{'yes' if r['same_as_first'] else 'NO':>5}  "
            + " ".join(f"{r['stages_s'].get(s, 0):>9.2f}" for s in stages),
            file=out,
        )
    if args.json:
        print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
