"""A segmented store's queries against its merged copy, and with or without the commits' counts of
deleted rows' terms, in one process.

    python bench/segment_queries.py --store DIR [--merged DIR] [--queries 400] [--rounds 3] [--json]

``--store``: a store left with several segments and deleted rows (e.g. the one
``bench/scale.py --chunks 1000000 --keep`` kept, after ``--reuse --rows edit_1``); ``--merged``: a
copy of it after ``quarry maintain`` (``cp -al STORE COPY && quarry maintain --db COPY``). The
queries are bench/scale.py's, their vectors put in each reader's cache first, so the figures are
search only.

Two measurements, each the p50 over the queries, for every round:

- **BM25 alone, each query new to the reader** (a reader opened fresh for the round): the
  segmented store with the deleted rows' term counts the commits wrote (``deleted.terms.npy``),
  the same store with them ignored (each reader counts deleted rows in a term's column, as
  before the counts existed), and the merged copy;
- **hybrid** ``Index.search(k=10)`` of the same three, query by query in turn (the order
  reversed every other query), as bench/scale.py's side-by-side row does.

Prints a table (stderr with ``--json``) and writes bench/results/segment_queries.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from common import ROOT


def _open(store: Path, settings, counts: bool):
    import quarry.search.query

    idx = quarry.search.query.open(store, settings)
    if not counts:
        bm25 = idx.snapshot.index.bm25
        bm25.dead_terms = [None] * len(bm25.parts)
    return idx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--merged", default=None)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import scale

    from quarry.retrieval.bm25 import query_tokens

    settings, queries, qvecs = scale._query_setup("hash", args.queries)
    tokens = [query_tokens(q) for q in queries]
    cases = [("counts", Path(args.store), True), ("ignored", Path(args.store), False)]
    if args.merged:
        cases.append(("merged", Path(args.merged), True))
    rounds: dict[str, dict[str, list[float]]] = {name: {"bm25": [], "hybrid": []} for name, _, _ in cases}
    shape = {}
    for _ in range(args.rounds):
        for name, store, counts in cases:  # BM25 alone, every query new to a fresh reader
            idx = _open(store, settings, counts)
            bm25 = idx.snapshot.index.bm25
            shape[name] = {
                "segments": len(bm25.parts),
                "deleted_rows": int(len(bm25.deleted)),
                "counted_segments": sum(x is not None for x in bm25.dead_terms),
            }
            for toks in tokens[:5]:  # the files paged in
                bm25.search_tokens(toks, 50)
            times = []
            for toks in tokens[5:]:
                t = time.perf_counter()
                bm25.search_tokens(toks, 50)
                times.append((time.perf_counter() - t) * 1000)
            rounds[name]["bm25"].append(statistics.median(times))
            idx.close()
        readers = [_open(store, settings, counts) for _, store, counts in cases]
        for idx in readers:
            scale._warm(idx, queries, qvecs)
        times = [[] for _ in readers]
        for i, q in enumerate(queries):
            order = list(range(len(readers)))
            for j in order if i % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                readers[j].search(q, k=10, mode="hybrid")
                times[j].append((time.perf_counter() - t) * 1000)
        for (name, _, _), ts, idx in zip(cases, times, readers):
            rounds[name]["hybrid"].append(statistics.median(ts))
            idx.close()
    rows = [
        {
            "case": name,
            **shape[name],
            "bm25_cold_p50_ms": [round(x, 3) for x in rounds[name]["bm25"]],
            "hybrid_p50_ms": [round(x, 3) for x in rounds[name]["hybrid"]],
        }
        for name, _, _ in cases
    ]
    payload = {
        "store": args.store,
        "merged": args.merged,
        "queries": args.queries,
        "rounds": args.rounds,
        "load_avg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "results": rows,
    }
    dest = ROOT / "bench" / "results" / "segment_queries.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(payload, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(
        f"python bench/segment_queries.py --store {args.store}" + (f" --merged {args.merged}" if args.merged else ""),
        file=out,
    )
    print(
        f"{'case':<8} {'segments':>8} {'deleted':>8} {'counted':>8}  {'BM25 p50 ms (rounds)':<24} hybrid p50 ms (rounds)",
        file=out,
    )
    for r in rows:
        print(
            f"{r['case']:<8} {r['segments']:>8} {r['deleted_rows']:>8} {r['counted_segments']:>8}  "
            f"{' '.join(f'{x:.3f}' for x in r['bm25_cold_p50_ms']):<24} "
            f"{' '.join(f'{x:.3f}' for x in r['hybrid_p50_ms'])}",
            file=out,
        )
    if args.json:
        print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
