"""The first `quarry index` of a new store, with no Prefect API configured: its private Prefect
server starts on a new database, either migrating it (no kept copy yet) or from the empty,
migrated copy the first such server kept (flows/orchestration.py). Prints one table and writes JSON.

    python bench/first_run.py [--rounds 3] [--json bench/results/first_run.json]

Each round indexes data/sample into two new stores, in turn: one with the kept copy removed
first, one with it in place. The ``hash`` embedder keeps model loading out of the comparison;
``QUARRY_CACHE_DIR`` is a folder of the bench's own, so the user's cache is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
CASES = ("migrates a new database", "copies the kept database")


def _index(db: Path, env: dict) -> float:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "quarry.cli.main", "index", str(SAMPLE), "--db", str(db)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"quarry index failed ({done.returncode}): {done.stderr[-2000:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "first_run.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="quarry-first-run-"))
    cache = work / "cache"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(QUARRY_CACHE_DIR=str(cache), QUARRY_EMBED_BACKEND="hash", HF_HUB_OFFLINE="1")
    times: dict[str, list[float]] = {case: [] for case in CASES}
    try:
        for r in range(args.rounds):
            shutil.rmtree(cache / "prefect", ignore_errors=True)
            times[CASES[0]].append(_index(work / f"migrated-{r}", env))
            if not list((cache / "prefect").glob("empty-*.db")):
                raise SystemExit("the first run kept no empty Prefect database")
            times[CASES[1]].append(_index(work / f"copied-{r}", env))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [{"case": case, "runs": len(ts), "median_s": round(statistics.median(ts), 2),
             "min_s": round(min(ts), 2), "max_s": round(max(ts), 2)} for case, ts in times.items()]
    print(f"first `quarry index` of a new store ({SAMPLE.relative_to(ROOT)}, hash embedder), wall seconds")
    print(f"{'private Prefect server':<28} {'runs':>4} {'median':>7} {'min':>7} {'max':>7}")
    for row in rows:
        print(f"{row['case']:<28} {row['runs']:>4} {row['median_s']:>7.2f} {row['min_s']:>7.2f} {row['max_s']:>7.2f}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "times": times, "cpu_count": os.cpu_count()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
