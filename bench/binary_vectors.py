"""Binary (sign-bit) vectors against exact float search, on real embeddings of real text.

    python bench/binary_vectors.py                  # all handbook chunks, table on stdout
    python bench/binary_vectors.py --scale 1000000  # plus latency on a synthetic 1M-row corpus

The corpus is the Sourcegraph handbook Markdown under ../shared/data, cut into ~600-character
paragraph pieces (``bench/embed.py``'s splitter) and embedded with the ``onnx-int8`` backend
(all-MiniLM-L6-v2, 384-d). Two query sets, embedded the same way: held-out handbook pieces
(in-domain: each has near neighbours) and the SciFact queries (out of domain: short claims
about biomedicine, whose neighbours in the handbook are close to ties, the hard case).
Embeddings are cached in bench/results/binary_vectors/ as .npy, keyed by the texts and model,
so reruns take seconds.

For every method: bytes held in memory, p50/p95 latency of one query (single-threaded
numpy, one query at a time, as a search request would run), recall@10 against exact float
cosine search, and "cosine kept": the mean cosine of a method's top 10 over that of the exact
top 10 (recall counts a near-tie swapped in as a miss; this says how near it was).
Methods take turns on each query, so load from other work falls on all of them alike.
Writes bench/results/binary_vectors.json.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import random
import sys
import time

from common import ROOT

HERE = str(ROOT / "bench")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# one query at a time on one core: what a search request costs, and comparable across methods
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from embed import DATA, split_paragraphs  # noqa: E402

from quarry.retrieval.binaryvec import BinaryIndex  # noqa: E402

RESULTS = os.path.join(HERE, "results", "binary_vectors.json")
CACHE = os.path.join(HERE, "results", "binary_vectors")
MULTIPLIERS = (2, 4, 8, 10)


def handbook_pieces(size: int = 600, seed: int = 0) -> list[str]:
    """Every handbook Markdown piece, in a fixed shuffled order."""
    paths = sorted(
        glob.glob(os.path.join(DATA, "trees", "sourcegraph-handbook", "content", "**", "*.md"), recursive=True)
    )
    pieces: list[str] = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            pieces.extend(split_paragraphs(f.read(), size))
    if not pieces:
        raise SystemExit(f"no handbook Markdown under {DATA}")
    pieces = list(dict.fromkeys(pieces))  # repeated boilerplate would make exact ties
    random.Random(seed).shuffle(pieces)
    return pieces


def scifact_queries() -> list[str]:
    path = os.path.join(DATA, "beir", "scifact", "queries.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def embed_cached(label: str, texts: list[str], embedder) -> np.ndarray:
    """Vectors of ``texts``, from bench/results/binary_vectors/ when embedded before."""
    key = hashlib.sha256("\x00".join([embedder.model, *texts]).encode()).hexdigest()[:16]
    path = os.path.join(CACHE, f"{label}-{key}.npy")
    if os.path.exists(path):
        return np.load(path)
    os.makedirs(CACHE, exist_ok=True)
    started = time.perf_counter()
    parts = []
    step = 512
    for start in range(0, len(texts), step):
        parts.append(embedder.embed(texts[start : start + step]))
        done = min(start + step, len(texts))
        rate = done / (time.perf_counter() - started)
        print(f"\rembedding {label}: {done}/{len(texts)} ({rate:.0f}/s)", end="", file=sys.stderr)
    print(file=sys.stderr)
    vectors = np.concatenate(parts).astype(np.float32)
    np.save(path + ".tmp.npy", vectors)
    os.replace(path + ".tmp.npy", path)
    return vectors


def flat_search(vectors: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Exact search over unit vectors: one matrix-vector product and a partial sort."""
    scores = vectors @ q
    top = np.argpartition(-scores, k - 1)[:k]
    return top[np.argsort(-scores[top], kind="stable")]


def measure(
    rows, queries: np.ndarray, truth: list[set[int]] | None, k: int, label: str, vectors: np.ndarray | None = None
) -> list[dict]:
    """Latency percentiles per query and recall@k against ``truth`` for every (name, bytes, fn).

    With ``vectors``, also the cosine kept: the mean true cosine of a method's top k over that
    of the exact top k (1.0 = as similar as the exact answer, even when other rows tie).

    Methods take turns on each query, so load from other work on a shared machine falls on
    all of them alike.
    """
    for _, _, fn in rows:  # warm-up
        for q in queries[:5]:
            fn(q)
    times = [[] for _ in rows]
    hits = [[] for _ in rows]
    kept = [[] for _ in rows]
    for i, q in enumerate(queries):
        for j, (_, _, fn) in enumerate(rows):
            started = time.perf_counter()
            idx = fn(q)
            times[j].append(time.perf_counter() - started)
            if truth is not None:
                hits[j].append(len(truth[i] & set(np.asarray(idx[:k]).tolist())) / k)
            if vectors is not None and truth is not None:
                best = float(np.mean(vectors[sorted(truth[i])] @ q))
                kept[j].append(float(np.mean(vectors[np.asarray(idx[:k])] @ q)) / best)
    out = []
    for (name, nbytes, _), t, h, c in zip(rows, times, hits, kept):
        ms = np.array(t) * 1000
        out.append(
            {
                "queries": label,
                "n_queries": len(queries),
                "method": name,
                "bytes": int(nbytes),
                "p50_ms": round(float(np.percentile(ms, 50)), 3),
                "p95_ms": round(float(np.percentile(ms, 95)), 3),
                "recall": round(float(np.mean(h)), 4) if h else None,
                "cosine_kept": round(float(np.mean(c)), 4) if c else None,
            }
        )
        print(f"{label}: {name}: p50 {out[-1]['p50_ms']} ms, recall {out[-1]['recall']}", file=sys.stderr)
    return out


def methods(vectors: np.ndarray, mapped: np.ndarray | None, k: int, center: bool):
    """(name, bytes in memory, search function) for every method compared."""
    index = BinaryIndex(vectors)
    rows = [
        ("exact float32", vectors.nbytes, lambda q: flat_search(vectors, q, k)),
        ("hamming only", index.nbytes, lambda q: index.search(q, k, rescore_multiplier=0)[0]),
    ]
    for m in MULTIPLIERS:
        rows.append((f"hamming + rescore x{m}", index.nbytes, lambda q, m=m: index.search(q, k, m)[0]))
    if mapped is not None:
        on_disk = BinaryIndex(mapped)
        rows.append(("hamming + rescore x4, floats memmapped", on_disk.nbytes, lambda q: on_disk.search(q, k, 4)[0]))
    if center:
        centred = BinaryIndex(vectors, center=True)
        rows.append(("centred hamming only", centred.nbytes, lambda q: centred.search(q, k, 0)[0]))
        rows.append(("centred hamming + rescore x4", centred.nbytes, lambda q: centred.search(q, k, 4)[0]))
    return rows


def run_set(label: str, vectors, mapped, queries, k: int, center: bool) -> list[dict]:
    truth = [set(flat_search(vectors, q, k).tolist()) for q in queries]
    return measure(methods(vectors, mapped, k, center), queries, truth, k, label, vectors)


def synthetic(vectors: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """``n`` unit vectors near real ones (each a perturbed copy), for latency at scale only."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, vectors.shape[1]), dtype=np.float32)
    for start in range(0, n, 65536):
        stop = min(n, start + 65536)
        block = vectors[rng.integers(0, len(vectors), stop - start)]
        block = block + 0.02 * rng.standard_normal(block.shape).astype(np.float32)
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def table(report: dict) -> str:
    lines = [
        f"corpus: {report['corpus']} handbook chunks, {report['dim']}-d {report['model']} ({report['backend']}); "
        f"k={report['k']}; one query at a time, 1 thread; {os.cpu_count()} CPUs",
        "",
        "| queries | method | memory | p50 ms | p95 ms | recall@10 | cosine kept |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        recall = "" if r["recall"] is None else f"{r['recall']:.3f}"
        kept = "" if r.get("cosine_kept") is None else f"{r['cosine_kept']:.4f}"
        lines.append(
            f"| {r['queries']} ({r['n_queries']}) | {r['method']} | {r['bytes'] / 2**20:.2f} MiB "
            f"| {r['p50_ms']:.3f} | {r['p95_ms']:.3f} | {recall} | {kept} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=0, help="corpus size (default 0: every handbook piece)")
    parser.add_argument("--holdout", type=int, default=500, help="handbook pieces held out as queries (default 500)")
    parser.add_argument("--scifact", type=int, default=1109, help="SciFact queries to use (default all 1109)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--center", action="store_true", help="also measure mean-centred bits")
    parser.add_argument(
        "--scale",
        type=int,
        default=0,
        help="also time a synthetic corpus of this many rows (perturbed copies; latency only)",
    )
    args = parser.parse_args(argv)

    from quarry.core.settings import Settings
    from quarry.ingest.embedders import get_embedder

    embedder = get_embedder(Settings.from_env(embed_backend="onnx-int8"))
    pieces = handbook_pieces()
    held, corpus_texts = pieces[: args.holdout], pieces[args.holdout :]
    if args.chunks:
        corpus_texts = corpus_texts[: args.chunks]
    vectors = embed_cached("handbook", corpus_texts, embedder)
    query_sets = [("handbook held-out", embed_cached("holdout", held, embedder))]
    sci = scifact_queries()[: args.scifact]
    if sci:
        query_sets.append(("SciFact", embed_cached("scifact", sci, embedder)))

    path = os.path.join(CACHE, "corpus-memmap.npy")
    np.save(path, vectors)
    mapped = np.load(path, mmap_mode="r")

    results = []
    for label, queries in query_sets:
        results.extend(run_set(label, vectors, mapped, queries, args.k, args.center))
    report = {
        "model": embedder.model,
        "backend": "onnx-int8",
        "dim": int(vectors.shape[1]),
        "corpus": int(len(vectors)),
        "k": args.k,
        "results": results,
    }

    if args.scale:
        big = synthetic(vectors, args.scale)
        queries = query_sets[0][1][:200]
        rows = [r for r in methods(big, None, args.k, False) if not r[0].endswith(("x2", "x8"))]
        scaled = measure(rows, queries, None, args.k, f"synthetic {args.scale:,} rows")
        report["scale"] = {"rows": args.scale, "results": scaled}

    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(report, f, indent=2)
    print(table(report))
    if "scale" in report:
        print()
        print(table({**report, "results": report["scale"]["results"]}).split("\n", 2)[2])
    print(f"\nwrote {os.path.relpath(RESULTS, ROOT)}")


if __name__ == "__main__":
    main()
