"""Where an index run's time goes, and what a run with nothing to do costs, in one long-lived process.

On a copy of a tree (default: the Sourcegraph handbook in ../shared/data), with one Prefect
server and one process throughout (the Python API, as `quarry serve` or a notebook would run it):

1. Prefect's own cost: ``import prefect`` in a fresh interpreter, starting quarry's private API
   server, and an empty flow run (the floor every flow run pays);
2. a full index, with the run's per-stage time and rows/s (``runs.durations``);
3. re-runs with nothing changed, then with every file touched (same bytes, new mtime): wall and
   CPU time of this process, quarry's own part (the run's ``total``), model calls and catalog
   copies (writer opens: each copies the whole catalog);
4. one paragraph of one file edited: chunks embedded against chunks whose text changed.

    python bench/flow_stages.py [--tree DIR] [--backend B] [--runner R] [--repeat N] [--json]
                                [--keep | --reuse DIR] [--in-flight N] [--full-only]

``--in-flight 1`` holds one batch at a time between submission and load: the stages alternate,
as before batches overlapped (compare with the default, 2, for what the overlap buys).

The table goes to stderr; with ``--json`` the JSON goes to stdout. Both are written to
bench/results/flow_stages.json. Timings depend on the machine's load: the load average is
recorded with them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED, machine

HANDBOOK = SHARED / "trees" / "sourcegraph-handbook"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def import_prefect_seconds() -> float:
    """``import prefect`` in a fresh interpreter (what every CLI run pays before any work)."""
    code = "import time; t = time.perf_counter(); import prefect; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def edit_one_paragraph(tree: Path) -> Path:
    """Append a sentence to the first long paragraph of a mid-sized Markdown file."""
    files = sorted(p for p in tree.rglob("*.md") if 4000 < p.stat().st_size < 20000)
    target = files[len(files) // 2]
    paras = target.read_text(encoding="utf-8").split("\n\n")
    i = next(i for i, p in enumerate(paras) if len(p) > 200 and not p.lstrip().startswith(("#", "|", "-", "*", "`")))
    paras[i] = paras[i].rstrip() + " This sentence was added by the flow benchmark."
    target.write_text("\n\n".join(paras), encoding="utf-8")
    return target


def chunk_hashes(db: Path, rel_path: str) -> set[str]:
    import quarry

    with quarry.open(db) as idx:
        rows = idx.snapshot.con.execute(
            "SELECT c.text_hash FROM chunks c JOIN documents d USING (doc_id) WHERE d.rel_path = ?", [rel_path]
        ).fetchall()
    return {r[0] for r in rows}


def idle_runs(run, tree: Path, db: Path, repeat: int) -> tuple[list[dict], list[dict], dict]:
    """Runs with nothing changed, with every file touched, then with one paragraph edited."""
    idle = [run(f"no change {i + 1}") for i in range(repeat)]
    for path in tree.rglob("*"):
        if path.is_file():
            os.utime(path)
    touched = [run(f"every file touched {i + 1}") for i in range(repeat)]
    edited = edit_one_paragraph(tree)
    rel = str(edited.relative_to(tree))
    old = chunk_hashes(db, rel)
    edit = run("one paragraph edited")
    edit["chunks_changed"] = len(chunk_hashes(db, rel) - old)
    return idle, touched, edit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=HANDBOOK)
    ap.add_argument(
        "--backend", default=None, help="embedding backend (default: quarry's default); hash = pipeline only"
    )
    ap.add_argument("--runner", default=None, help="task runner (default: quarry's default, threads)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each nothing-to-do case")
    ap.add_argument("--json", action="store_true", help="JSON on stdout (the table still goes to stderr)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (tree and store) for --reuse")
    ap.add_argument("--reuse", type=Path, default=None, help="a kept work folder: skip the full index")
    ap.add_argument(
        "--in-flight", type=int, default=None, help="batches between submission and load (default: the runner's)"
    )
    ap.add_argument("--full-only", action="store_true", help="the full index alone (no idle, touch or edit runs)")
    args = ap.parse_args()
    if args.backend:
        os.environ["QUARRY_EMBED_BACKEND"] = args.backend
    if args.runner:
        os.environ["QUARRY_RUNNER"] = args.runner

    prefect_import = import_prefect_seconds()
    from quarry.flows.orchestration import prefect_api, prefect_environment

    prefect_environment()
    if args.reuse:
        work = args.reuse
    else:
        if not args.tree.exists():
            sys.exit(f"tree not found: {args.tree}")
        work = Path(tempfile.mkdtemp(prefix="quarry-bench-flow-"))
        shutil.copytree(args.tree, work / "tree")
    tree, db = work / "tree", work / "db"
    t = time.perf_counter()
    with prefect_api(work / "logs"):
        server_start = time.perf_counter() - t
        import dataclasses

        import quarry.flows.index as index_module
        from prefect import flow
        from quarry.flows.index import index_flow

        from quarry.store.pointer import read_pointer

        if args.in_flight:
            planned = index_module.plan_runner
            index_module.plan_runner = lambda settings: dataclasses.replace(planned(settings), in_flight=args.in_flight)
        from quarry.store.writer import StoreWriter

        opens = {"n": 0}
        real_open = StoreWriter.open

        def counting_open(self):
            opens["n"] += 1  # every writer open copies the committed catalog
            return real_open(self)

        StoreWriter.open = counting_open

        def empty():
            return None

        def floor(flow_object) -> float:
            """Median wall time of an empty flow run."""
            flow_object()  # the first flow run of a process also pays for imports
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                flow_object()
                times.append(time.perf_counter() - t)
            return statistics.median(times)

        floor_default = floor(flow(name="empty")(empty))  # Prefect's defaults: with the run heartbeat
        floor_quarry = floor(index_module._flow(name="empty-called")(empty))  # as quarry's flow is called

        def run(step: str) -> dict:
            before_opens, pointer = opens["n"], read_pointer(db)
            t, c = time.perf_counter(), cpu_seconds()
            report = index_flow([str(tree)], db=str(db))
            wall, cpu = time.perf_counter() - t, cpu_seconds() - c
            after = read_pointer(db)
            return {
                "step": step,
                "wall_s": round(wall, 4),
                "cpu_s": round(cpu, 4),
                "quarry_s": report["durations"]["total"]["seconds"],
                "model_calls": report["model_calls"],
                "embedded": report["embedded_chunks"],
                "catalog_copies": opens["n"] - before_opens,
                "new_generation": pointer is None or after.generation != pointer.generation,
                "report": report,
            }

        full = None
        if not args.reuse:
            full = run("full index")
        if args.full_only:
            idle = touched = []
            edit = None
        else:
            idle, touched, edit = idle_runs(run, tree, db, args.repeat)

    def summary(runs: list[dict]) -> dict | None:
        if not runs:
            return None
        return {
            "runs": len(runs),
            "wall_median_s": round(statistics.median(r["wall_s"] for r in runs), 4),
            "wall_max_s": max(r["wall_s"] for r in runs),
            "cpu_median_s": round(statistics.median(r["cpu_s"] for r in runs), 4),
            "quarry_median_s": round(statistics.median(r["quarry_s"] for r in runs), 4),
            "model_calls": sum(r["model_calls"] for r in runs),
            "catalog_copies": sum(r["catalog_copies"] for r in runs),
            "new_generations": sum(bool(r["new_generation"]) for r in runs),
        }

    result = {
        "tree": str(args.tree),
        "files": sum(1 for p in tree.rglob("*") if p.is_file()),
        "backend": os.environ.get("QUARRY_EMBED_BACKEND", "default"),
        "runner": os.environ.get("QUARRY_RUNNER", "threads"),
        "machine": machine(),
        "prefect": {
            "import_s": round(prefect_import, 3),
            "server_start_s": round(server_start, 3),
            "empty_flow_median_s": round(floor_default, 4),
            "empty_flow_no_heartbeat_median_s": round(floor_quarry, 4),
        },
        "full": None
        if full is None
        else {k: v for k, v in full.items() if k != "report"}
        | {
            "durations": full["report"]["durations"],
            "chunks": full["report"]["chunks"],
            "files_added": full["report"]["added"],
        },
        "no_change": summary(idle),
        "touched": summary(touched),
        "in_flight": args.in_flight,
        "edit": None
        if edit is None
        else {k: v for k, v in edit.items() if k != "report"} | {"exact": edit["embedded"] == edit["chunks_changed"]},
    }
    out = ROOT / "bench" / "results" / "flow_stages.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))

    err = sys.stderr
    load = result["machine"]["load_average"]
    print(
        f"{result['files']} files, backend {result['backend']}, runner {result['runner']}, "
        f"{result['machine']['cpus']} CPUs, load average {load[0]} {load[1]} {load[2]}",
        file=err,
    )
    p = result["prefect"]
    print(
        f"prefect: import {p['import_s']:.2f} s, private server start {p['server_start_s']:.2f} s, "
        f"empty flow run {p['empty_flow_median_s']:.3f} s, without the run heartbeat (as quarry's flow is "
        f"called) {p['empty_flow_no_heartbeat_median_s']:.3f} s (medians of {args.repeat})",
        file=err,
    )
    if full is not None:
        print(f"\nfull index: {full['wall_s']:.1f} s wall, {result['full']['chunks']} chunks", file=err)
        print(f"  {'stage':<9} {'wall s':>9} {'busy s':>9} {'rows':>8} {'rows/s':>10}", file=err)
        for stage, d in result["full"]["durations"].items():
            rows = "" if d["rows"] is None else d["rows"]
            rate = "" if not d["rows_per_s"] else f"{d['rows_per_s']:.0f}"
            busy = "" if d.get("busy_seconds") is None else f"{d['busy_seconds']:.3f}"
            print(f"  {stage:<9} {d['seconds']:>9.3f} {busy:>9} {rows:>8} {rate:>10}", file=err)
        print("  wall = while any batch was in the stage; busy = summed over batches side by side", file=err)
    if edit is not None:
        print(
            f"\n{'case':<22} {'wall med':>9} {'wall max':>9} {'cpu med':>8} {'quarry':>8} {'calls':>6} {'copies':>7}",
            file=err,
        )
        for name in ("no_change", "touched"):
            s = result[name]
            print(
                f"{name:<22} {s['wall_median_s']:>9.3f} {s['wall_max_s']:>9.3f} {s['cpu_median_s']:>8.3f} "
                f"{s['quarry_median_s']:>8.3f} {s['model_calls']:>6} {s['catalog_copies']:>7}",
                file=err,
            )
        e = result["edit"]
        print(
            f"{'one paragraph edited':<22} {e['wall_s']:>9.3f} {'':>9} {e['cpu_s']:>8.3f} {e['quarry_s']:>8.3f} "
            f"{e['model_calls']:>6} {e['catalog_copies']:>7}   embedded {e['embedded']} chunks, "
            f"{e['chunks_changed']} changed text (exact: {e['exact']})",
            file=err,
        )
        print(
            "quarry = the run's own wall time (runs.durations.total); wall adds Prefect's flow-run overhead; "
            "cpu = this process only",
            file=err,
        )
    if args.json:
        print(json.dumps(result, indent=2))
    if args.keep or args.reuse:
        print(f"work folder: {work}", file=err)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
