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

``--rows N`` (e.g. 1000000) compares ANN indexes at N rows instead: quarry's IVF at several
``nlist`` / probe shares and, when installed, faiss (IVF-Flat, HNSW-Flat), hnswlib and usearch.
No model embeds a million chunks here, so the corpus is the real vectors above plus synthetic
ones made from them: row ``r`` beyond the real ones is ``normalise(e_i + a e_j + 0.35 g)`` for
two random real vectors ``e_i, e_j``, ``a`` uniform in [0, 0.5] and ``g`` Gaussian of expected
norm 1 (seed 0), so every row lies near the real embedding distribution without duplicating it.
Truth is exact search over the same N rows; queries are the real SciFact queries. Each index is
timed one query at a time in CPU milliseconds (k = 10), with a random 20% row filter as a second case where the
library supports one. Writes bench/results/ann_scale-<N>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from common import ROOT, SHARED, log

os.environ.setdefault("LANCEDB_LOG", "error")
CACHE = ROOT / "bench" / "results" / "ann"
SCIFACT_STORE = ROOT / "bench" / "results" / "stores" / "scifact-onnx-int8"


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
    from quarry.store.pointer import read_pointer

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
    ap.add_argument("--rows", type=int, default=0, help="compare ANN libraries at this many rows (see above)")
    ap.add_argument(
        "--libraries",
        default="quarry-ivf,faiss-ivf,usearch,hnswlib,faiss-hnsw",
        help="with --rows: which indexes to build",
    )
    ap.add_argument("--max-queries", type=int, default=0, help="with --rows: time only the first N queries")
    ap.add_argument("--nlists", default="1000,2000,4000", help="with --rows: IVF list counts to try")
    args = ap.parse_args()
    import numpy as np

    if args.rows:
        return compare_at_scale(args)

    from quarry.retrieval import dense

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
        index = dense.DenseIndex(arrays, probe_share=share, min_probes=1)
        found, ms = timed(index, queries, args.k, method="ivf")
        rows.append(
            {
                "method": "ivf",
                "setting": f"nlist {info['ivf']['nlist']}, nprobe {index.nprobe()} (share {share:g})",
                "probe_share": share,
                "recall_at_10": round(recall(found, truth), 4),
                "p50_ms": ms,
            }
        )
    index = dense.DenseIndex(arrays)
    found, ms = timed(index, queries, args.k, method="ivf")
    rows.append(
        {
            "method": "ivf",
            "setting": f"nlist {info['ivf']['nlist']}, nprobe {index.nprobe()} (default)",
            "recall_at_10": round(recall(found, truth), 4),
            "p50_ms": ms,
            "default": True,
        }
    )
    # Filtered: the truth is exact search over the kept rows; "auto" is what a search runs.
    default = dense.DenseIndex(arrays)
    n_hand = len(handbook_vectors())
    rng = np.random.default_rng(0)
    masks = {
        "random 20% of rows": rng.random(len(corpus)) < 0.2,
        "random 2% of rows": rng.random(len(corpus)) < 0.02,
        "SciFact rows only (the queries' own)": np.arange(len(corpus)) >= n_hand,
        "handbook rows only (far from queries)": np.arange(len(corpus)) < n_hand,
    }
    for name, mask in masks.items():
        want, _ = timed(exact, queries, args.k, method="exact", mask=mask)
        found, ms = timed(default, queries, args.k, method="auto", mask=mask)
        rows.append(
            {
                "method": "auto+filter",
                "setting": f"{name}",
                "kept": int(mask.sum()),
                "recall_at_10": round(recall(found, want), 4),
                "p50_ms": ms,
            }
        )
    for mult in (4, 10, 20):
        found, ms = timed(exact, queries, args.k, method="binary", rescore_multiplier=mult)
        rows.append(
            {
                "method": "binary",
                "setting": f"rescore x{mult}",
                "recall_at_10": round(recall(found, truth), 4),
                "p50_ms": ms,
            }
        )
    out = {
        "corpus": len(corpus),
        "queries": len(queries),
        "model": "all-MiniLM-L6-v2 (onnx-int8)",
        "ivf_build_seconds": round(build_s, 2),
        "ivf": info["ivf"],
        "results": rows,
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "ann_recall.json").write_text(json.dumps(out, indent=2))
    lines = [f"{'method':<12} {'setting':<40} {'recall@10':>9} {'p50 ms':>8}"]
    lines += [f"{r['method']:<12} {r['setting']:<40} {r['recall_at_10']:>9} {r['p50_ms']:>8}" for r in rows]
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))


# --- ANN indexes at scale ----------------------------------------------------------------------


def synthetic_corpus(real, rows: int, seed: int = 0):
    """``rows`` unit vectors: the real ones, then mixtures of two real ones plus noise (see above)."""
    import numpy as np

    from quarry.retrieval import dense

    rng = np.random.default_rng(seed)
    out = np.empty((rows, real.shape[1]), dtype=np.float32)
    out[: len(real)] = real[:rows]
    for start in range(len(real), rows, 65536):
        stop = min(rows, start + 65536)
        i = rng.integers(0, len(real), stop - start)
        j = rng.integers(0, len(real), stop - start)
        a = rng.uniform(0, 0.5, (stop - start, 1)).astype(np.float32)
        g = rng.standard_normal((stop - start, real.shape[1]), dtype=np.float32) / np.sqrt(real.shape[1])
        out[start:stop] = dense.normalise(real[i] + a * real[j] + 0.35 * g)
    return out


def exact_top(corpus, queries, k, mask=None):
    import numpy as np

    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(corpus), 131072):
        block = corpus[start : start + 131072] @ queries.T  # rows x queries
        if mask is not None:
            block[~mask[start : start + 131072]] = -np.inf
        s = np.concatenate([best_s, block.T], axis=1)
        ids = np.concatenate(
            [best_i, np.broadcast_to(np.arange(start, start + len(block)), (len(queries), len(block)))], axis=1
        )
        pick = np.argpartition(-s, k - 1, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(s, pick, 1), np.take_along_axis(ids, pick, 1)
    return [set(r.tolist()) for r in best_i]


def _rss_mb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) // 1024 for line in fh if line.startswith("VmRSS"))


def _time_queries(fn, queries, truth, k):
    # CPU time, not wall time: on a shared, loaded machine the wall time is mostly the wait for
    # a core (every search here runs on one thread).
    samples, hits = [], []
    for q, want in zip(queries, truth):
        t = time.process_time()
        got = fn(q)
        samples.append((time.process_time() - t) * 1000)
        hits.append(len({int(x) for x in got[:k]} & want) / k)
    ordered = sorted(samples)
    return (
        round(statistics.mean(hits), 4),
        round(statistics.median(ordered), 2),
        round(ordered[int(0.95 * (len(ordered) - 1))], 2),
    )


def compare_at_scale(args) -> None:
    import gc

    import numpy as np

    from quarry.retrieval import dense

    k = args.k
    # The handbook's vectors when they are cached (embedding them takes minutes on a busy machine).
    parts = [scifact_store_vectors()] + ([np.load(CACHE / "handbook.npy")] if (CACHE / "handbook.npy").exists() else [])
    real = dense.normalise(np.concatenate(parts))
    queries = dense.normalise(query_vectors())
    queries = queries[: args.max_queries] if args.max_queries else queries
    t0 = time.perf_counter()
    corpus = synthetic_corpus(real, args.rows)
    log(
        f"{len(real)} real vectors -> {len(corpus)} rows in {time.perf_counter() - t0:.0f} s; "
        f"{len(queries)} real queries; load {os.getloadavg()[0]:.1f}"
    )
    mask = np.random.default_rng(1).random(len(corpus)) < 0.2
    t0 = time.perf_counter()
    truth = exact_top(corpus, queries, k)
    truth_f = exact_top(corpus, queries, k, mask)
    log(f"  exact truth in {time.perf_counter() - t0:.0f} s")
    libs = set(args.libraries.split(","))
    rows: list[dict] = []

    def add(method, setting, build_s, mem_mb, fn, fn_f=None):
        r, p50, p95 = _time_queries(fn, queries, truth, k)
        row = {
            "method": method,
            "setting": setting,
            "build_s": round(build_s, 1),
            "mem_mb": mem_mb,
            "recall_at_10": r,
            "p50_ms": p50,
            "p95_ms": p95,
            "load": round(os.getloadavg()[0], 1),
        }
        if fn_f is not None:
            row["filtered_recall_at_10"], row["filtered_p50_ms"], row["filtered_p95_ms"] = _time_queries(
                fn_f, queries, truth_f, k
            )
        rows.append(row)
        log(
            f"  {method:<12} {setting:<34} build {build_s:6.1f} s  recall {r:.4f}  p50 {p50} ms  p95 {p95} ms"
            + (
                f"  | 20% filter: recall {row['filtered_recall_at_10']:.4f} p50 {row['filtered_p50_ms']} ms"
                if fn_f
                else ""
            )
        )

    if "quarry-ivf" in libs:
        for nlist in [int(x) for x in args.nlists.split(",")]:
            t0 = time.perf_counter()
            arrays, info = dense.build(corpus, ivf_min_rows=0, nlist=nlist)
            build_s = time.perf_counter() - t0
            for share in [float(x) for x in args.shares.split(",")]:
                index = dense.DenseIndex(arrays, probe_share=share, min_probes=1)
                add(
                    "quarry-ivf",
                    f"nlist {nlist}, nprobe {index.nprobe()}",
                    build_s,
                    0,
                    lambda q: index.search(q, k, method="ivf")[0],
                    lambda q: index.search(q, k, mask=mask)[0],
                )
            index = dense.DenseIndex(arrays)
            add(
                "quarry-ivf",
                f"nlist {nlist}, nprobe {index.nprobe()} (default probes)",
                build_s,
                0,
                lambda q: index.search(q, k, method="ivf")[0],
                lambda q: index.search(q, k, mask=mask)[0],
            )
            del arrays
            gc.collect()
    if "faiss-ivf" in libs or "faiss-hnsw" in libs:
        import faiss

        faiss.omp_set_num_threads(1)  # one query at a time; threads only wait on each other here
        if "faiss-ivf" in libs:
            nlist = 4000 if args.rows >= 500_000 else int(4 * np.sqrt(args.rows))
            t0 = time.perf_counter()
            quant = faiss.IndexFlatIP(corpus.shape[1])
            index = faiss.IndexIVFFlat(quant, corpus.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(
                corpus[np.random.default_rng(0).choice(len(corpus), min(len(corpus), nlist * 32), replace=False)]
            )
            index.add(corpus)
            build_s = time.perf_counter() - t0
            bits = np.packbits(mask, bitorder="little")  # kept alive: the selector points into it
            sel = faiss.IDSelectorBitmap(len(corpus), faiss.swig_ptr(bits))
            for nprobe in (16, 32, 64, 128):
                p = faiss.SearchParametersIVF(nprobe=nprobe)
                pf = faiss.SearchParametersIVF(nprobe=nprobe, sel=sel)
                add(
                    "faiss-ivf",
                    f"nlist {nlist}, nprobe {nprobe}",
                    build_s,
                    0,
                    lambda q: index.search(q[None], k, params=p)[1][0],
                    lambda q: index.search(q[None], k, params=pf)[1][0],
                )
            del index, quant
            gc.collect()
        if "faiss-hnsw" in libs:
            t0 = time.perf_counter()
            index = faiss.IndexHNSWFlat(corpus.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = 80
            faiss.omp_set_num_threads(2)
            index.add(corpus)
            faiss.omp_set_num_threads(1)
            build_s = time.perf_counter() - t0
            for ef in (32, 64, 128):
                p = faiss.SearchParametersHNSW(efSearch=ef)
                add(
                    "faiss-hnsw",
                    f"M 32, efC 80, efSearch {ef}",
                    build_s,
                    0,
                    lambda q: index.search(q[None], k, params=p)[1][0],
                )
            del index
            gc.collect()
    if "usearch" in libs:
        from usearch.index import Index

        for dtype in ("f16", "i8"):
            t0 = time.perf_counter()
            index = Index(ndim=corpus.shape[1], metric="cos", dtype=dtype, connectivity=16, expansion_add=128)
            index.add(np.arange(len(corpus)), corpus, threads=2, log=False)
            build_s = time.perf_counter() - t0
            for ef in (32, 64, 128):
                index.expansion_search = ef
                add(
                    "usearch",
                    f"{dtype}, M 16, efC 128, ef {ef}",
                    build_s,
                    0,
                    lambda q: index.search(q, k, threads=1).keys,
                )
            del index
            gc.collect()
    if "hnswlib" in libs:
        import hnswlib

        t0 = time.perf_counter()
        index = hnswlib.Index(space="ip", dim=corpus.shape[1])
        index.init_index(max_elements=len(corpus), M=16, ef_construction=100)
        index.set_num_threads(2)
        index.add_items(corpus, np.arange(len(corpus)))
        index.set_num_threads(1)
        build_s = time.perf_counter() - t0
        for ef in (32, 64, 128):
            index.set_ef(ef)
            add(
                "hnswlib",
                f"M 16, efC 100, ef {ef}",
                build_s,
                0,
                lambda q: index.knn_query(q, k)[0][0],
                lambda q: index.knn_query(q, k, filter=lambda i: bool(mask[i]))[0][0],
            )
        del index
    out = {
        "rows": len(corpus),
        "real_rows": len(real),
        "queries": len(queries),
        "k": k,
        "corpus": "real MiniLM vectors + mixtures normalise(e_i + a e_j + 0.35 g), seed 0 (see the docstring)",
        "results": rows,
    }
    (ROOT / "bench" / "results" / f"ann_scale-{len(corpus)}.json").write_text(json.dumps(out, indent=2))
    lines = [
        f"{'method':<12} {'setting':<34} {'build s':>8} {'recall@10':>9} {'p50 ms':>7} {'p95 ms':>7} {'filt. recall':>12}"
    ]
    lines += [
        f"{r['method']:<12} {r['setting']:<34} {r['build_s']:>8} {r['recall_at_10']:>9} {r['p50_ms']:>7} "
        f"{r['p95_ms']:>7} {r.get('filtered_recall_at_10', ''):>12}"
        for r in rows
    ]
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
