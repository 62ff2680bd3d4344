"""Time to a first result: ``quarry index data/sample`` on a new store and again on the same store,
with no Prefect API configured, each run's wall time split into where it went. Prints one table
and writes JSON.

    python bench/first_run.py [--rounds 3] [--before /path/to/other/checkout] [--json PATH]

Each round runs, in turn, for this checkout (``after``) and for ``--before`` when given (another
checkout with its own ``.venv``, e.g. of ``main``: the two interleave, so both meet the same load):

- ``new store, empty cache``: no kept Prefect database yet (a user's very first run);
- ``new store``: a new store with the cache the first run left;
- ``second run``: the same store again, nothing changed;
- ``new store, at a terminal`` and its ``second run, at a terminal``: the same two with
  ``QUARRY_PREFECT_LINGER=300``, what a run at a terminal does: the first leaves its Prefect server
  for the next run of the store, and the second uses it (a checkout without the setting runs
  both as above). The bench ends that server after the pair.

The split comes from timestamps each process of the run appends to a file (``bench/trace``, put on
``PYTHONPATH``; it imports nothing early): ``import`` is the start of the interpreter to the start
of the Prefect server's process, plus any time the flow still waited after the server was ready
(the parent's own imports); ``server`` the server's process from its start to listening, less
``migrations`` (Prefect's ``create_db``: its schema's migrations, or the check that there are
none); ``flow`` the index flow less ``commit``; ``exit`` the flow's end to the process's (stopping
the server, Prefect's log and event workers, the interpreter's exit). The ``hash`` embedder keeps
model loading out; ``QUARRY_CACHE_DIR`` is a folder of the bench's own, one per checkout. ``cpu``
is the user and system time of the run's processes (quarry and its server), which the machine's
load changes far less than the wall time.
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

from common import ROOT

SAMPLE = ROOT / "data" / "sample"
TRACE = ROOT / "bench" / "trace"
CASES = ("new store, empty cache", "new store", "second run", "new store, at a terminal", "second run, at a terminal")
PARTS = ("import", "server", "migrations", "flow", "commit", "exit")


def _python(checkout: Path) -> str:
    python = checkout / ".venv" / "bin" / "python"
    if checkout == ROOT and not python.exists():
        return sys.executable
    if not python.exists():
        raise SystemExit(f"{checkout}: no .venv/bin/python")
    return str(python)


def _index(checkout: Path, db: Path, cache: Path, trace: Path, linger: str = "0") -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PYTHONPATH")}
    env.update(
        QUARRY_CACHE_DIR=str(cache),
        QUARRY_EMBED_BACKEND="hash",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(TRACE),
        QUARRY_BENCH_TRACE=str(trace),
        QUARRY_PREFECT_LINGER=linger,
    )
    trace.unlink(missing_ok=True)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    done = subprocess.run(
        [_python(checkout), "-m", "quarry.cli.main", "index", str(SAMPLE), "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
        timeout=600,
        check=False,
    )
    end = time.time()
    if done.returncode != 0:
        raise SystemExit(f"quarry index failed ({done.returncode}) in {checkout}: {done.stderr[-2000:]}")
    now = resource.getrusage(resource.RUSAGE_CHILDREN)  # quarry and the server it waited for
    cpu = (now.ru_utime + now.ru_stime) - (used.ru_utime + used.ru_stime)
    parts = split(start, end, [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()])
    return {**parts, "cpu": round(cpu, 3)}


def _end_lingering(db: Path) -> None:
    """Stop the Prefect server a run at a terminal left for the next run of ``db``."""
    try:
        pid = json.loads((db / "prefect" / "server.json").read_text(encoding="utf-8"))["pid"]
        os.kill(int(pid), 15)
    except (OSError, ValueError, KeyError):
        pass


def split(start: float, end: float, events: list[dict]) -> dict:
    """One run's wall time in parts (see the module's docstring); a part that did not happen is 0."""
    parent = events[0]["pid"]
    first = {}
    for e in events:
        first.setdefault((e["event"], e["pid"] == parent), e)

    def at(event, in_parent):
        return first[(event, in_parent)]["t"] if (event, in_parent) in first else None

    flow_start, flow_end = at("flow_start", True), at("flow_end", True)
    commit = first[("flow_end", True)].get("commit_s") or 0.0
    server_start, ready = at("process_start", False), at("server_ready", False)
    migrate = (at("migrate_end", False) or 0.0) - (at("migrate_start", False) or 0.0)
    if server_start is None or ready is None:  # no server of its own (the API was elsewhere, or in-process)
        server_start = ready = flow_start
    parts = {
        "import": (server_start - start) + max(0.0, flow_start - ready),
        "server": (min(ready, flow_start) - server_start) - migrate,
        "migrations": migrate,
        "flow": (flow_end - flow_start) - commit,
        "commit": commit,
        "exit": end - flow_end,
    }
    return {**{k: round(v, 3) for k, v in parts.items()}, "wall": round(end - start, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout (with .venv) to run the same way, interleaved")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "first_run.json"))
    args = parser.parse_args()

    versions = {"after": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    work = Path(tempfile.mkdtemp(prefix="quarry-first-run-"))
    runs: dict[str, dict[str, list[dict]]] = {v: {c: [] for c in CASES} for v in versions}
    load = [os.getloadavg()[0]]
    try:
        for r in range(args.rounds):
            for name, checkout in list(versions.items()) if r % 2 == 0 else list(versions.items())[::-1]:
                cache, trace = work / f"cache-{name}", work / f"trace-{name}.jsonl"
                shutil.rmtree(cache, ignore_errors=True)
                runs[name][CASES[0]].append(_index(checkout, work / f"{name}-{r}-a", cache, trace))
                runs[name][CASES[1]].append(_index(checkout, work / f"{name}-{r}-b", cache, trace))
                runs[name][CASES[2]].append(_index(checkout, work / f"{name}-{r}-b", cache, trace))
                runs[name][CASES[3]].append(_index(checkout, work / f"{name}-{r}-c", cache, trace, "300"))
                runs[name][CASES[4]].append(_index(checkout, work / f"{name}-{r}-c", cache, trace, "300"))
                _end_lingering(work / f"{name}-{r}-c")
            load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    for name in versions:
        for case in CASES:
            ts = runs[name][case]
            rows.append(
                {
                    "version": name,
                    "case": case,
                    "runs": len(ts),
                    **{k: round(statistics.median(t[k] for t in ts), 2) for k in (*PARTS, "wall", "cpu")},
                    "wall_min": round(min(t["wall"] for t in ts), 2),
                    "wall_max": round(max(t["wall"] for t in ts), 2),
                }
            )
    print(
        f"quarry index {SAMPLE.relative_to(ROOT)} (hash embedder, no PREFECT_API_URL), median seconds of "
        f"{args.rounds} runs; load average {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs"
    )
    head = (
        f"{'':<7} {'case':<26}" + "".join(f" {p:>10}" for p in PARTS) + f" {'wall':>6} {'min':>6} {'max':>6} {'cpu':>6}"
    )
    print(head)
    for row in rows:
        print(
            f"{row['version']:<7} {row['case']:<26}"
            + "".join(f" {row[p]:>10.2f}" for p in PARTS)
            + f" {row['wall']:>6.2f} {row['wall_min']:>6.2f} {row['wall_max']:>6.2f} {row['cpu']:>6.2f}"
        )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "runs": runs,
                "load": load,
                "cpu_count": os.cpu_count(),
                "checkouts": {k: str(v) for k, v in versions.items()},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
