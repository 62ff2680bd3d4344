"""Retrieval quality on BEIR sets, every mode side by side in one run.

    python bench/eval_beir.py [--sets scifact,cranfield] [--backend B] [--split test] [--json]

Indexes each set through the real flow into bench/results/stores/<set>-<backend> (kept, so a
second run is an unchanged re-index), scores bm25 / vector / hybrid, prints a table next to the
published anchors and writes bench/results/eval_beir.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import common
from common import ROOT, SHARED

BEIR = SHARED / "beir"

# Published nDCG@10 (from ../shared/data/README.md) for the sets that have them.
ANCHORS = {
    "scifact": "BM25 Pyserini 0.679 · DuckDB fts 0.671 · MiniLM-L6 dense 0.645 · bge-base 0.741 · RRF QuackIR 0.744",
    "cranfield": "DuckDB fts BM25 measured on this copy 0.376",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="scifact,cranfield")
    ap.add_argument("--backend", default=None)
    ap.add_argument("--split", default="test")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.backend:
        os.environ["QUARRY_EMBED_BACKEND"] = args.backend
    backend = os.environ.get("QUARRY_EMBED_BACKEND", "default")

    from quarry.flows.orchestration import prefect_api

    from quarry.eval.beir import run_beir_eval

    stores = ROOT / "bench" / "results" / "stores"
    results = []
    with prefect_api(stores / "logs"):
        from quarry.flows.index import index_flow

        for name in args.sets.split(","):
            folder = BEIR / name
            if not folder.exists():
                print(f"skipping {name}: {folder} not found", file=sys.stderr)
                continue
            out = run_beir_eval(
                str(folder),
                db=str(stores / f"{name}-{backend}"),
                modes=("bm25", "vector", "hybrid"),
                split=args.split,
                index=lambda paths, store: index_flow(paths, db=str(store)),
            )
            out["backend"] = backend
            results.append(out)
    common.write_json(common.RESULTS / "eval_beir.json", {"results": results})
    stream = sys.stderr if args.json else sys.stdout
    rows = [
        [r["dataset"], mode] + [f"{m[key]:.4f}" for key in ("ndcg@10", "recall@10", "recall@100", "mrr@10")]
        for r in results
        for mode, m in r["modes"].items()
    ]
    print(common.table(["set", "mode", "nDCG@10", "R@10", "R@100", "MRR@10"], rows), file=stream)
    for r in results:
        if r["dataset"] in ANCHORS:
            print(f"{r['dataset']} anchors: {ANCHORS[r['dataset']]}", file=stream)
    if args.json:
        print(json.dumps({"results": results}, indent=2))


if __name__ == "__main__":
    main()
