"""Recall@10 of quarry's approximate vector search (IVF, binary) against exact search, on real
embeddings.

Corpus: the Sourcegraph handbook (../shared/data/trees/sourcegraph-handbook) chunked by quarry's
own pipeline and embedded with the onnx-int8 MiniLM backend, plus the chunks of the SciFact
store that bench/eval_beir.py builds when it is there (same model). Queries: the SciFact
queries, embedded with the same model. Everything embedded is cached as .npy under
bench/results/ann/.

For each IVF probe share it builds the IVF index exactly as a commit does (``dense.build``)
and reports recall@10 and latency; then recall of filtered searches (``auto``, as a search runs
them) against exact search over the rows the filter keeps; then binary search at a few
re-scoring multipliers.

    python bench/ann_recall.py [--json] [--shares 0.04,0.0625,0.0833,0.125]

Prints a table (stderr with --json) and writes bench/results/ann_recall.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
CACHE = ROOT / "bench" / "results" / "ann"
SCIFACT_STORE = ROOT / "bench" / "results" / "stores" / "scifact-onnx-int8"


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def settings():
    from quarry.core.settings import Settings

    return Settings.from_env(embed_backend="onnx-int8")


def handbook_vectors():
    import numpy as np

    path = CACHE / "handbook.npy"
    if path.exists():
        return np.load(path)
    from quarry.ingest.discover import discover
    from quarry.ingest.embedders import get_embedder
    from quarry.ingest.embedding import embed_records
    from quarry.ingest.plan import new_doc_id
    from quarry.ingest.process import process_files

    log("embedding the handbook with onnx-int8 (once; cached) ...")
    t0 = time.perf_counter()
    files, _ = discover([SHARED / "trees" / "sourcegraph-handbook"])
    s = settings()
    records, _, _ = process_files([(f, new_doc_id(f)) for f in files], s)
    vectors, stats = embed_records(records, get_embedder(s))
    matrix = np.stack([vectors[c.text_hash] for r in records for c in r.chunks]).astype(np.float32)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, matrix)
    log(f"  {len(matrix)} chunks in {time.perf_counter() - t0:.0f} s")
    return matrix


def scifact_store_vectors():
    import numpy as np

    path = CACHE / "scifact-store.npy"
    if path.exists():
        return np.load(path)
    if not (SCIFACT_STORE / "CURRENT").exists():
        return np.zeros((0, 384), dtype=np.float32)
    from quarry.store import vectors
    from quarry.store.layout import read_pointer

    pointer = read_pointer(SCIFACT_STORE)
    table = vectors.open_for_read(SCIFACT_STORE, pointer.vector_table, pointer.vector_version)
    _, matrix = vectors.read_all(table)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, matrix)
    return matrix


def query_vectors():
    import numpy as np

    path = CACHE / "scifact-queries.npy"
    if path.exists():
        return np.load(path)
    from quarry.ingest.embedders import get_embedder

    lines = (SHARED / "beir" / "scifact" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    matrix = get_embedder(settings()).embed(texts).astype(np.float32)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, matrix)
    return matrix


def recall(found, truth) -> float:
    return statistics.mean(len(set(f) & set(t)) / len(t) for f, t in zip(found, truth))


def timed(index, queries, k, **kwargs):
    out, samples = [], []
    for q in queries:
        t = time.perf_counter()
        rows, _ = index.search(q, k, **kwargs)
        samples.append((time.perf_counter() - t) * 1000)
        out.append(rows.tolist())
    return out, round(statistics.median(samples), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shares", default="0.0625,0.0833,0.1,0.125,0.15", help="IVF probe shares to try")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import numpy as np

    from quarry.index import dense

    corpus = np.concatenate([handbook_vectors(), scifact_store_vectors()])
    corpus = dense.normalise(corpus)
    queries = dense.normalise(query_vectors())
    log(f"{len(corpus)} real chunk vectors, {len(queries)} real queries")
    exact = dense.DenseIndex({"dense.vectors.npy": corpus})
    truth, exact_ms = timed(exact, queries, args.k, method="exact")
    rows = [{"method": "exact", "setting": "", "recall_at_10": 1.0, "p50_ms": exact_ms}]
    t0 = time.perf_counter()
    arrays, info = dense.build(corpus, ivf_min_rows=0)
    build_s = time.perf_counter() - t0
    for share in [float(s) for s in args.shares.split(",")]:
        index = dense.DenseIndex(arrays, probe_share=share)
        found, ms = timed(index, queries, args.k, method="ivf")
        rows.append({"method": "ivf", "setting": f"nlist {info['ivf']['nlist']}, nprobe {index.nprobe()} "
                     f"(share {share:g})", "probe_share": share, "recall_at_10": round(recall(found, truth), 4),
                     "p50_ms": ms, "default": abs(share - dense.PROBE_SHARE) < 1e-3})
    # Filtered: the truth is exact search over the kept rows; "auto" is what a search runs.
    default = dense.DenseIndex(arrays)
    n_hand = len(handbook_vectors())
    rng = np.random.default_rng(0)
    masks = {"random 20% of rows": rng.random(len(corpus)) < 0.2, "random 2% of rows": rng.random(len(corpus)) < 0.02,
             "SciFact rows only (the queries' own)": np.arange(len(corpus)) >= n_hand,
             "handbook rows only (far from queries)": np.arange(len(corpus)) < n_hand}
    for name, mask in masks.items():
        want, _ = timed(exact, queries, args.k, method="exact", mask=mask)
        found, ms = timed(default, queries, args.k, method="auto", mask=mask)
        rows.append({"method": "auto+filter", "setting": f"{name}", "kept": int(mask.sum()),
                     "recall_at_10": round(recall(found, want), 4), "p50_ms": ms})
    for mult in (4, 10, 20):
        found, ms = timed(exact, queries, args.k, method="binary", rescore_multiplier=mult)
        rows.append({"method": "binary", "setting": f"rescore x{mult}", "recall_at_10": round(recall(found, truth), 4),
                     "p50_ms": ms})
    out = {"corpus": len(corpus), "queries": len(queries), "model": "all-MiniLM-L6-v2 (onnx-int8)",
           "ivf_build_seconds": round(build_s, 2), "ivf": info["ivf"], "results": rows}
    CACHE.mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "ann_recall.json").write_text(json.dumps(out, indent=2))
    lines = [f"{'method':<12} {'setting':<40} {'recall@10':>9} {'p50 ms':>8}"]
    lines += [f"{r['method']:<12} {r['setting']:<40} {r['recall_at_10']:>9} {r['p50_ms']:>8}" for r in rows]
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
