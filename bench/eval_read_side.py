"""Do context windows, relevant segments or reranking change retrieval quality on BEIR sets?

    python bench/eval_read_side.py [--sets scifact,cranfield] [--backend onnx-int8] [--split test]
                                   [--tune-split train] [--limit N] [--rerank SPEC] [--json]

Uses the stores bench/eval_beir.py builds (bench/results/stores/<set>-<backend>), indexing one
only when it is missing. Fusion runs with its defaults (rrf_k 60, equal weights): nothing here
is tuned on the test queries. The one choice RSE leaves open, how relevance is derived
(``scores`` or ``rank``), is compared on ``--tune-split`` (SciFact's train queries) and the
test split is reported for both, so the choice can be checked against data it was not made on.

BEIR judges whole documents, so every method is scored on documents:

- ``nDCG@10`` / ``R@10``: documents in order of first appearance (a chunk list, a window list or
  a segment list each give a document ranking). Windows group hits by document and keep the
  best hit's order, so their ranking equals the plain hybrid one by construction; segments drop
  documents no segment covers.
- ``R@ctx30``: share of relevant documents present in the first 30 chunks of context handed to
  a reader (results, windows or segments, in order, each costing its length in chunks): what a
  fixed reading budget buys.
- ``R@shown``: share of relevant documents in what a ``-k 10`` call returns (below), and
  ``hybR@same``: the same for the plain hybrid ranking cut at the same number of chunks, query
  by query: does the method spend a reading budget better than the ranking it starts from?
- ``ctx``: mean chunks of context a ``-k 10`` call returns per query (10 results, the windows
  of the top 10 hits, or every segment RSE picks), ``units``: mean results, windows or segments.

Ranking metrics read deep lists: the 200-chunk hybrid ranking, windows around its top 50 hits,
the segments, or the reranked top 30 followed by the rest.

Prints a table and writes bench/results/eval_read_side.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED

BEIR = SHARED / "beir"
STORES = ROOT / "bench" / "results" / "stores"
BUDGET = 30  # chunks of context for R@ctx


def doc_ranking(units, by_path) -> list[str]:
    return list(dict.fromkeys(by_path.get(u.path, u.path) for u in units))


def size(unit) -> int:
    """Chunks a result (1), window or segment hands a reader."""
    return unit.last_chunk - unit.first_chunk + 1 if hasattr(unit, "first_chunk") else 1


def ctx_docs(units, by_path, budget: int = BUDGET) -> set[str]:
    """Documents whose unit starts within the first ``budget`` chunks of context."""
    seen, used = set(), 0
    for u in units:
        if used >= budget:
            break
        seen.add(by_path.get(u.path, u.path))
        used += size(u)
    return seen


def score(rows: dict[str, dict], qrels) -> dict:
    from quarry.eval.evaluation import evaluate

    rankings = {q: r["ranking"] for q, r in rows.items()}
    base = evaluate(rankings, qrels)
    recall = {"ctx": 0.0, "shown": 0.0, "same": 0.0}
    n = 0
    for q, rels in qrels.items():
        relevant = {d for d, g in rels.items() if g > 0}
        if not relevant:
            continue
        n += 1
        for key in recall:
            recall[key] += len(relevant & rows.get(q, {}).get(key, set())) / len(relevant)
    return {
        "ndcg@10": base["ndcg@10"],
        "recall@10": base["recall@10"],
        "recall@ctx30": recall["ctx"] / max(n, 1),
        "recall_shown": recall["shown"] / max(n, 1),
        "hybrid_recall_same_ctx": recall["same"] / max(n, 1),
        "ctx_chunks": sum(r["chunks"] for r in rows.values()) / max(len(rows), 1),
        "units": sum(r["units"] for r in rows.values()) / max(len(rows), 1),
    }


def ensure_store(name: str, backend: str) -> tuple[Path, dict[str, str]]:
    """The store for ``name`` (indexed here only if missing) and its path -> BEIR doc id map."""
    from quarry.eval.evaluation import load_beir, write_corpus_tree

    store = STORES / f"{name}-{backend}"
    tree = store.parent / f"{store.name}-corpus" / name
    beir = load_beir(str(BEIR / name), "test")
    if not (store / "CURRENT").exists():
        from quarry.flows.orchestration import prefect_api

        from quarry.eval.beir import run_beir_eval

        os.environ["QUARRY_EMBED_BACKEND"] = backend
        with prefect_api(STORES / "logs"):
            from quarry.flows.index import index_flow

            run_beir_eval(str(BEIR / name), db=str(store), modes=(), index=lambda p, s: index_flow(p, db=str(s)))
    with tempfile.TemporaryDirectory() as scratch:  # the names only; the store's tree is left alone
        mapping = write_corpus_tree(beir, scratch)
    return store, {str((tree / rel).resolve()): doc_id for rel, doc_id in mapping.items()}


def run_split(idx, name: str, split: str, by_path, limit, methods) -> dict:
    from quarry.eval.evaluation import load_beir
    from quarry.search.segments import get_params, segments_from_results
    from quarry.search.windows import expand

    beir = load_beir(str(BEIR / name), split)
    qids = sorted(beir.queries)[:limit] if limit else sorted(beir.queries)
    qrels = {q: beir.qrels[q] for q in qids}
    idx.prime_queries([beir.queries[q] for q in qids])
    rows: dict[str, dict[str, dict]] = {m: {} for m in methods}
    t0 = time.perf_counter()
    for q in qids:
        text = beir.queries[q]
        pool = idx.search(text, k=200, mode="hybrid", candidates=200).results
        for m in methods:
            # deep: the list the ranking metrics read; shown: what a k=10 call hands a reader
            if m == "hybrid":
                deep, shown = pool, pool[:10]
            elif m.startswith("window"):
                b, a = (int(x) for x in m.split(" ")[1].split(","))
                deep, shown = expand(idx, pool[:50], b, a), expand(idx, pool[:10], b, a)
            elif m.startswith("segments"):
                _, preset, relevance = m.split(" ")
                deep = shown = segments_from_results(idx, pool, get_params(preset, relevance=relevance))
            elif m.startswith("rerank"):
                head = methods[m].rerank(text, pool[:30])
                deep, shown = head + pool[30:], head[:10]
            else:
                raise ValueError(m)
            chunks = sum(size(u) for u in shown)
            rows[m][q] = {
                "ranking": doc_ranking(deep, by_path),
                "ctx": ctx_docs(deep, by_path),
                "chunks": chunks,
                "units": len(shown),
                "shown": set(doc_ranking(shown, by_path)),
                "same": set(doc_ranking(pool[:chunks], by_path)),
            }
    elapsed = time.perf_counter() - t0
    return {
        "dataset": name,
        "split": split,
        "queries": len(qids),
        "seconds": round(elapsed, 1),
        "methods": {m: score(rows[m], qrels) for m in methods},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="scifact,cranfield")
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--split", default="test")
    ap.add_argument("--tune-split", default="train", help="split used to compare RSE relevance modes ('' skips)")
    ap.add_argument("--limit", type=int, default=None, help="first N queries per split (quick checks)")
    ap.add_argument("--rerank", default=None, help="also score a reranker, e.g. cross-encoder:/path/to/model")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ["QUARRY_EMBED_BACKEND"] = args.backend

    import quarry

    methods: dict[str, object] = dict.fromkeys(
        (
            "hybrid",
            "window 1,1",
            "window 0,2",
            "segments balanced scores",
            "segments balanced rank",
            "segments precision scores",
            "segments find_all scores",
        )
    )
    if args.rerank:
        from quarry.search.rerank import get_reranker

        methods[f"rerank {args.rerank}"] = get_reranker(args.rerank)
    results = []
    for name in args.sets.split(","):
        if not (BEIR / name).exists():
            print(f"skipping {name}: {BEIR / name} not found", file=sys.stderr)
            continue
        store, by_path = ensure_store(name, args.backend)
        with quarry.open(store) as idx:
            splits = [args.split]
            if args.tune_split and (BEIR / name / "qrels" / f"{args.tune_split}.tsv").exists():
                splits.insert(0, args.tune_split)
            for split in splits:
                results.append(run_split(idx, name, split, by_path, args.limit, methods))
    dest = ROOT / "bench" / "results" / "eval_read_side.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"budget_chunks": BUDGET, "results": results}, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(
        f"{'set':<10} {'split':<6} {'method':<26} {'nDCG@10':>8} {'R@10':>7} {'R@ctx30':>8} {'ctx':>5} "
        f"{'units':>5} {'R@shown':>8} {'hybR@same':>9}",
        file=out,
    )
    for r in results:
        for m, s in r["methods"].items():
            print(
                f"{r['dataset']:<10} {r['split']:<6} {m:<26} {s['ndcg@10']:>8.4f} {s['recall@10']:>7.4f} "
                f"{s['recall@ctx30']:>8.4f} {s['ctx_chunks']:>5.1f} {s['units']:>5.1f} {s['recall_shown']:>8.4f} "
                f"{s['hybrid_recall_same_ctx']:>9.4f}",
                file=out,
            )
    if args.json:
        print(json.dumps({"budget_chunks": BUDGET, "results": results}, indent=2))


if __name__ == "__main__":
    main()
