"""Fusion methods side by side on judged sets, tuned on training queries only.

    python bench/fusion.py [--sets scifact,cranfield] [--backend onnx-int8] [--json]

Each set is indexed once through the real flow (bench/results/stores/<set>-<backend>, kept), then
every judged query's vector and BM25 candidates (top 100 chunks with their raw scores) are read
once and fused offline by each method, so the methods see exactly the same candidates.

Methods: reciprocal rank fusion (k = 60, the default before issue 18); convex combinations
``a * norm(vector) + (1 - a) * norm(bm25)`` with per-query min-max normalisation (``mm``), with
Bruch et al.'s theoretical lower bounds (``tmm``: cosine -1, BM25 0) and with z-scores (``z``)
(Bruch, Gai, Ingber: An Analysis of Fusion Functions for Hybrid Retrieval, TOIS 2023). The
weight ``a`` of each convex method is chosen on SciFact's train split (809 queries) and nowhere
else; the test numbers of every set use that one value. Writes bench/results/fusion.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from common import ROOT, SHARED

BEIR = SHARED / "beir"
POOL = 100
ALPHAS = [round(a, 2) for a in np.arange(0.0, 1.01, 0.05)]


def candidates(name: str, backend: str, splits: list[str]) -> dict:
    """{split: {qid: {"vector": [(doc, score)], "bm25": [...]}}}, plus qrels, for one set."""
    from quarry.flows.orchestration import prefect_api

    import quarry
    from quarry.eval.evaluation import load_beir, write_corpus_tree

    stores = ROOT / "bench" / "results" / "stores"
    store = stores / f"{name}-{backend}"
    out = {}
    mapping = None
    for split in splits:
        beir = load_beir(str(BEIR / name), split)
        if mapping is None:
            tree = store.parent / f"{store.name}-corpus" / beir.name
            mapping = write_corpus_tree(beir, str(tree))
            by_path = {str((tree / rel).resolve()): doc for rel, doc in mapping.items()}
            if not (store / "CURRENT").exists():  # kept between runs: the corpus does not change
                with prefect_api(stores / "logs"):
                    from quarry.flows.index import index_flow

                    index_flow([str(tree)], db=str(store))
        lists = {}
        with quarry.open(store) as idx:
            qids = sorted(beir.queries)
            idx.prime_queries([beir.queries[q] for q in qids])
            for q in qids:
                lists[q] = {}
                for mode in ("vector", "bm25"):
                    hits = idx.search(beir.queries[q], k=POOL, mode=mode, candidates=POOL).results
                    lists[q][mode] = [(h.chunk_id, by_path.get(h.path, h.path), h.scores[mode]) for h in hits]
        out[split] = {"lists": lists, "qrels": {q: beir.qrels[q] for q in qids}}
    return out


def _norm(scores: np.ndarray, how: str, floor: float) -> np.ndarray:
    if len(scores) == 0:
        return scores
    if how == "mm":
        lo, hi = scores.min(), scores.max()
    elif how == "tmm":
        lo, hi = floor, scores.max()
    else:  # z
        sd = scores.std() or 1.0
        return (scores - scores.mean()) / sd
    return (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)


def fuse(lists: dict, method: str, alpha: float = 0.5) -> list[str]:
    """A fused chunk ranking -> document ranking (first chunk of each document counts)."""
    docs: dict[str, str] = {}
    fused: dict[str, float] = {}
    if method == "rrf":
        for mode in ("vector", "bm25"):
            for rank, (chunk, doc, _s) in enumerate(lists[mode], start=1):
                fused[chunk] = fused.get(chunk, 0.0) + 1.0 / (60 + rank)
                docs[chunk] = doc
    else:
        floors = {"vector": -1.0, "bm25": 0.0}
        weights = {"vector": alpha, "bm25": 1.0 - alpha}
        missing = {}
        for mode in ("vector", "bm25"):
            items = lists[mode]
            norm = _norm(np.array([s for _c, _d, s in items], dtype=np.float64), method, floors[mode])
            # a chunk the other retriever did not return gets that retriever's lowest normalised score
            missing[mode] = float(norm.min()) if len(norm) else 0.0
            for (chunk, doc, _s), v in zip(items, norm):
                fused.setdefault(chunk, {})[mode] = float(v)
                docs[chunk] = doc
        fused = {
            c: sum(weights[m] * parts.get(m, missing[m]) for m in ("vector", "bm25")) for c, parts in fused.items()
        }
    ranking, seen = [], set()
    for chunk in sorted(fused, key=lambda c: (-fused[c], c)):
        if docs[chunk] not in seen:
            seen.add(docs[chunk])
            ranking.append(docs[chunk])
    return ranking


def single(lists: dict, mode: str) -> list[str]:
    ranking, seen = [], set()
    for _c, doc, _s in lists[mode]:
        if doc not in seen:
            seen.add(doc)
            ranking.append(doc)
    return ranking


def score(data: dict, ranker) -> dict:
    from quarry.eval.evaluation import evaluate

    return evaluate({q: ranker(lists) for q, lists in data["lists"].items()}, data["qrels"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="scifact,cranfield")
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ["QUARRY_EMBED_BACKEND"] = args.backend

    data = {}
    for name in args.sets.split(","):
        splits = ["train", "test"] if (BEIR / name / "qrels" / "train.tsv").exists() else ["test"]
        data[name] = candidates(name, args.backend, splits)

    tuned = {}
    train = data.get("scifact", {}).get("train")
    for method in ("mm", "tmm", "z"):
        if train is None:
            tuned[method] = 0.5
            continue
        best = max(ALPHAS, key=lambda a: (score(train, lambda lists: fuse(lists, method, a))["ndcg@10"], -abs(a - 0.5)))
        tuned[method] = best
    rows = []
    for name, splits in data.items():
        test = splits["test"]
        for label, ranker in [
            ("bm25", lambda lists: single(lists, "bm25")),
            ("vector", lambda lists: single(lists, "vector")),
            ("rrf", lambda lists: fuse(lists, "rrf")),
        ] + [(f"{m} a={tuned[m]}", (lambda m: lambda lists: fuse(lists, m, tuned[m]))(m)) for m in ("mm", "tmm", "z")]:
            m = score(test, ranker)
            rows.append(
                {
                    "set": name,
                    "method": label,
                    "ndcg@10": m["ndcg@10"],
                    "recall@10": m["recall@10"],
                    "recall@100": m["recall@100"],
                }
            )
    dest = ROOT / "bench" / "results" / "fusion.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"tuned_on": "scifact train", "alphas": tuned, "results": rows}, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(f"{'set':<10} {'method':<12} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7}", file=out)
    for r in rows:
        print(
            f"{r['set']:<10} {r['method']:<12} {r['ndcg@10']:>8.4f} {r['recall@10']:>7.4f} {r['recall@100']:>7.4f}",
            file=out,
        )
    if args.json:
        print(json.dumps({"alphas": tuned, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
