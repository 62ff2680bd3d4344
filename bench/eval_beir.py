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
    dest = ROOT / "bench" / "results" / "eval_beir.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"results": results}, indent=2))
    table = sys.stderr if args.json else sys.stdout
    print(f"{'set':<10} {'mode':<7} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7} {'MRR@10':>7}", file=table)
    for r in results:
        for mode, m in r["modes"].items():
            print(
                f"{r['dataset']:<10} {mode:<7} {m['ndcg@10']:>8.4f} {m['recall@10']:>7.4f} {m['recall@100']:>7.4f} "
                f"{m['mrr@10']:>7.4f}",
                file=table,
            )
        if r["dataset"] in ANCHORS:
            print(f"{'':<10} anchors: {ANCHORS[r['dataset']]}", file=table)
    if args.json:
        print(json.dumps({"results": results}, indent=2))


if __name__ == "__main__":
    main()
