"""Query latency at scale: quarry's warm API against LanceDB's native hybrid search.

For each size it builds (once, cached under bench/results/stores/query-<size>/) a store through
quarry's own StoreWriter, so the layout, catalog and index files are the real ones. The data is
synthetic at scale: each chunk is ~6 real sentences drawn from ../shared/data (the Sourcegraph
handbook and SciFact abstracts) plus, now and then, a code such as FY2018, E11000 or v1.4.4;
vectors are random unit 384-d vectors (no model embeds 100K chunks here). Ten chunks make a
document; 20% of documents are PDFs, which the filtered runs keep (``file_type = pdf``).

Then, in one process, it times warm in-process queries (after a warm-up pass) of quarry's
``vector``, ``bm25`` and ``hybrid`` modes with and without the filter, and LanceDB's native
search on the same rows (a second table with the chunk text, a native FTS index, an
IVF_HNSW_SQ vector index, and ``RRFReranker`` for hybrid), plus the wall time of a cold
``quarry search`` process. Query embeddings are computed before timing for both engines (the
warm API caches them), so the numbers are search only.

    python bench/query_latency.py [--sizes 10000,100000] [--queries 200] [--json] [--skip-native]

Prints a table (stderr with --json) and writes bench/results/query_latency.json; ``--json``
prints ``{"results": [{"engine", "size", "mode", "filtered", "p50_ms", "p95_ms", ...}]}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, ROOT, SHARED, log, machine, write_json

os.environ.setdefault("LANCEDB_LOG", "error")
DIM = 384
MODEL = f"quarry-hash-{DIM}"  # the hash embedder's name, so `quarry search` can embed queries
CHUNKS_PER_DOC = 10
STORE_FORMAT = 3  # bump to rebuild cached stores
NATIVE_TABLE = "chunks_v2"  # rename to rebuild the cached LanceDB-native table
CODES = ["FY2018", "E11000", "v1.4.4", "Q2", "2018", "HTTP 503", "ISO-8601", "RFC 7231", "x86_64", "utf-8"]
TYPES = ["md"] * 5 + ["pdf"] * 2 + ["html", "txt", "rst"]


# --- data ----------------------------------------------------------------------------------------


def sentences() -> list[str]:
    out: list[str] = []
    handbook = SHARED / "trees" / "sourcegraph-handbook"
    for path in sorted(handbook.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        text = re.sub(r"```.*?```", " ", text, flags=re.S)
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        for line in text.splitlines():
            line = line.strip().lstrip("#>*- ").strip()
            out.extend(s for s in re.split(r"(?<=[.!?])\s+", line) if 40 <= len(s) <= 300)
    corpus = SHARED / "beir" / "scifact" / "corpus.jsonl"
    if corpus.exists():
        for line in corpus.read_text(encoding="utf-8").splitlines():
            text = json.loads(line)["text"]
            out.extend(s for s in re.split(r"(?<=[.!?])\s+", text) if 40 <= len(s) <= 300)
    if not out:
        sys.exit(f"no sentences found under {SHARED}: the shared data folder is needed")
    return out


def make_records(size: int, sents: list[str], rng):
    from quarry.core.models import Chunk, DocumentRecord, FileInfo, Section, join_header

    n_docs = max(1, size // CHUNKS_PER_DOC)
    base = dt.datetime(2019, 1, 1).timestamp()
    for d in range(n_docs):
        name = f"doc{d:07d}"
        doc_id = hashlib.sha256(name.encode()).hexdigest()[:20]
        ftype = TYPES[int(rng.integers(len(TYPES)))]
        title = sents[int(rng.integers(len(sents)))][:60]
        folder = f"team{d % 8}/area{d % 31}"
        file = FileInfo(
            path=f"/corpus/{folder}/{name}.{ftype}",
            root="/corpus",
            rel_path=f"{folder}/{name}.{ftype}",
            file_type=ftype,
            size=8000,
            mtime=base + float(rng.integers(0, 6 * 365 * 86400)),
            sha256=hashlib.sha256(name.encode()).hexdigest(),
        )
        chunks, pos = [], 0
        for c in range(CHUNKS_PER_DOC):
            parts = [sents[int(i)] for i in rng.integers(0, len(sents), size=6)]
            if rng.random() < 0.05:
                parts.insert(int(rng.integers(len(parts))), f"See {CODES[int(rng.integers(len(CODES)))]}.")
            text = " ".join(parts)
            header = f"Document: {title}"
            page = c // 3 + 1 if ftype == "pdf" else None
            chunks.append(
                Chunk(
                    chunk_id=f"{doc_id}:{c}",
                    doc_id=doc_id,
                    section_index=0,
                    chunk_index=c,
                    start=pos,
                    end=pos + len(text),
                    page_start=page,
                    page_end=page,
                    header=header,
                    text=text,
                    text_hash=hashlib.sha256(join_header(header, text).encode()).hexdigest(),
                    n_tokens=180,
                )
            )
            pos += len(text) + 1
        yield DocumentRecord(
            doc_id=doc_id,
            file=file,
            title=title,
            summary="",
            metadata={"team": f"team{d % 8}"},
            sections=[Section(0, title, 1, 0, pos)],
            chunks=chunks,
        )


def build_store(size: int, folder: Path, sents: list[str]) -> dict:
    import numpy as np

    from quarry.store.writer import StoreWriter

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    store = folder / "store"
    rng = np.random.default_rng(size)
    t0 = time.perf_counter()
    writer = StoreWriter(store, MODEL, DIM).open()
    try:
        batch = []
        for record in make_records(size, sents, rng):
            batch.append(record)
            if len(batch) == 2000:
                _write(writer, batch, rng)
                batch = []
        if batch:
            _write(writer, batch, rng)
        load_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        writer.commit(
            {
                "run_id": "bench",
                "started": dt.datetime.now(),
                "status": "completed",
                "roots": ["/corpus"],
                "errors": [],
                "durations": {},
                "settings": {},
            },
            {},
        )
        commit_s = time.perf_counter() - t1
    finally:
        writer.close()
    manifest = json.loads(next(store.glob("index-*/index.json")).read_text())
    info = {
        "format": STORE_FORMAT,
        "size": size,
        "load_seconds": round(load_s, 1),
        "commit_seconds": round(commit_s, 2),
        "index": manifest,
    }
    log(
        f"  built {size} chunks: load {load_s:.1f} s, commit {commit_s:.1f} s "
        f"(search index {manifest['build_seconds']} s: BM25 {manifest['bm25']['seconds']} s, "
        f"vectors read {manifest['dense']['read_seconds']} s, dense/IVF {manifest['dense']['seconds']} s)"
    )
    return info


def _write(writer, records, rng) -> None:
    import numpy as np

    chunks = [c for r in records for c in r.chunks]
    vecs = rng.standard_normal((len(chunks), DIM), dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    writer.write_documents(records, {c.text_hash: v for c, v in zip(chunks, vecs)}, "bench")


def ensure_store(size: int, sents, rebuild: bool) -> tuple[Path, dict]:
    folder = RESULTS / "stores" / f"query-{size}"
    marker = folder / "built.json"
    if not rebuild and marker.exists():
        info = json.loads(marker.read_text())
        if info.get("format") == STORE_FORMAT:
            return folder, info
    log(f"building a {size}-chunk store in {folder} ...")
    info = build_store(size, folder, sents)
    marker.write_text(json.dumps(info, indent=2))
    return folder, info


def reindex_dense(store: Path) -> dict:
    """Rebuild only the vector files of the committed search index (the BM25 and row files do
    not depend on quarry/retrieval/dense.py): rows back into row order, then ``dense.build``."""
    import numpy as np

    from quarry.retrieval import dense, searchindex
    from quarry.store.pointer import read_pointer

    folder = store / searchindex.folder_name(read_pointer(store).generation)
    t0 = time.perf_counter()
    stored = np.load(folder / "dense.vectors.npy", mmap_mode="r")
    vectors = np.empty(stored.shape, dtype=np.float32)
    slot_rows = folder / "dense.slot_rows.npy"
    if slot_rows.exists():
        vectors[np.load(slot_rows)] = stored
    else:
        vectors[:] = stored
    del stored
    arrays, info = dense.build(vectors, searchindex.ivf_min_rows())
    del vectors
    for old in folder.glob("*.npy"):
        if old.name.startswith(("dense.", "ivf.")) and old.name not in arrays:
            old.unlink()
    for name, value in arrays.items():
        tmp = folder / f"{name}.tmp"
        with open(tmp, "wb") as fh:
            np.save(fh, value, allow_pickle=False)
        os.replace(tmp, folder / name)
    manifest = json.loads((folder / searchindex.MANIFEST).read_text())
    manifest["dense"] = {**info, "read_seconds": manifest["dense"].get("read_seconds")}
    (folder / searchindex.MANIFEST).write_text(json.dumps(manifest, indent=2))
    log(f"  vector index rebuilt in {time.perf_counter() - t0:.1f} s ({info})")
    return manifest


def reindex(store: Path) -> dict:
    """Rebuild the committed generation's search index folder in place, from its catalog and vectors."""
    import duckdb

    from quarry.retrieval import searchindex
    from quarry.store import vectors as qvectors
    from quarry.store.pointer import read_pointer

    pointer = read_pointer(store)
    t0 = time.perf_counter()
    con = duckdb.connect(str(store / pointer.catalog), read_only=True)
    try:
        table = qvectors.open_for_read(store, pointer.vector_table, pointer.vector_version)
        arrays, manifest = searchindex.build(con, qvectors.read_all(table), pointer.model, pointer.dim)
    finally:
        con.close()
    searchindex.write(store / searchindex.folder_name(pointer.generation), arrays, manifest)
    log(f"  search index rebuilt in {time.perf_counter() - t0:.1f} s (dense {manifest['dense']})")
    return manifest


def make_queries(n: int, sents, rng) -> list[str]:
    words = [w for s in sents[:20000] for w in re.findall(r"[A-Za-z]{4,}", s)]
    out = []
    for i in range(n):
        if i % 10 == 0:
            out.append(CODES[i // 10 % len(CODES)])
        else:
            out.append(" ".join(words[int(j)] for j in rng.integers(0, len(words), size=int(rng.integers(2, 6)))))
    return out


# --- measurement ---------------------------------------------------------------------------------


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return round(statistics.median(ordered), 2), round(p95, 2)


def measure_quarry(store: Path, size: int, queries: list[str], vectors, vector_search: str = "auto") -> list[dict]:
    import quarry.search.query
    from quarry.core.settings import Settings
    from quarry.search.filters import Filter

    idx = quarry.search.query.open(
        store, Settings.from_env(embed_backend="hash", embed_dim=DIM), vector_search=vector_search
    )
    for q, v in zip(queries, vectors):
        idx._query_cache.put(q, v)  # embeddings are not what is timed (see the docstring)
    filters = {False: None, True: Filter.build(file_type=["pdf"])}
    t = time.perf_counter()
    _, kept = idx.filter_mask(filters[True])
    first_mask_ms = (time.perf_counter() - t) * 1000
    rows = []
    for mode in ("vector", "bm25", "hybrid"):
        for filtered, flt in filters.items():
            for q in queries[:20]:  # warm-up: page cache, stems
                idx.search(q, k=10, mode=mode, filters=flt)
            samples, cpu = [], []
            for q in queries:
                t, c = time.perf_counter(), time.process_time()
                idx.search(q, k=10, mode=mode, filters=flt)
                samples.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
            p50, p95 = percentiles(samples)
            c50, c95 = percentiles(cpu)
            # CPU time is what a query costs on an idle core; on a shared, loaded machine the
            # wall time adds however long the scheduler kept the process waiting.
            rows.append(
                {
                    "engine": "quarry",
                    "size": size,
                    "mode": mode,
                    "filtered": filtered,
                    "p50_ms": p50,
                    "p95_ms": p95,
                    "p50_cpu_ms": c50,
                    "p95_cpu_ms": c95,
                    "load": round(os.getloadavg()[0], 1),
                    "vector_search": vector_search,
                    "filter": "file_type = pdf" if filtered else "",
                    "kept_rows": kept if filtered else size,
                    **({"filter_first_call_ms": round(first_mask_ms, 1)} if filtered else {}),
                }
            )
    idx.close()
    return rows


def native_table(folder: Path, store: Path):
    """LanceDB's own hybrid setup on the same rows: text + FTS index + IVF_HNSW_SQ (cosine).

    HNSW is built with m=16, ef_construction=100 instead of LanceDB's 20/300: on 2 cores the
    defaults take six minutes at 100K chunks, these two (search latency is about the same).
    """
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS, IvfHnswSq

    import quarry.search.query
    from quarry.core.settings import Settings
    from quarry.store import vectors as qvectors

    db = lancedb.connect(str(folder / "native"))
    try:
        table = db.open_table(NATIVE_TABLE)
        if len(table.list_indices()) >= 2:
            return table
        db.drop_table(NATIVE_TABLE)
    except (FileNotFoundError, ValueError):
        pass
    log("  building the LanceDB-native comparison table (text + FTS + IVF_HNSW_SQ) ...")
    t0 = time.perf_counter()
    idx = quarry.search.query.open(store, Settings.from_env(embed_backend="hash", embed_dim=DIM))
    cat = idx.snapshot.con.execute(
        "SELECT c.chunk_id, c.header || '\n' || c.text AS text, d.file_type "
        "FROM chunks c JOIN documents d USING (doc_id) ORDER BY c.chunk_id"
    ).fetch_arrow_table()
    ids, matrix = qvectors.read_all(idx.snapshot.table)
    idx.close()
    vec_of = dict(zip(ids.to_pylist(), range(len(ids))))
    order = [vec_of[c] for c in cat.column("chunk_id").to_pylist()]
    vec = pa.FixedSizeListArray.from_arrays(pa.array(matrix[order].ravel()), DIM)
    table = db.create_table(NATIVE_TABLE, cat.append_column("vector", vec))
    table.create_index("text", config=FTS())
    table.create_index("vector", config=IvfHnswSq(distance_type="cosine", m=16, ef_construction=100))
    log(f"  native table built in {time.perf_counter() - t0:.1f} s")
    return table


def measure_native(folder: Path, store: Path, size: int, queries, vectors) -> list[dict]:
    from lancedb.rerankers import RRFReranker

    table = native_table(folder, store)
    reranker = RRFReranker()
    pool = 50

    def run(mode: str, q: str, v, where: str | None):
        if mode == "vector":
            s = table.search(v, vector_column_name="vector").distance_type("cosine")
        elif mode == "bm25":
            s = table.search(q, query_type="fts")
        else:
            s = (
                table.search(query_type="hybrid", vector_column_name="vector")
                .vector(v)
                .text(q)
                .distance_type("cosine")
                .rerank(reranker)
            )
        if where:
            s = s.where(where, prefilter=True)
        return s.select(["chunk_id"]).limit(pool if mode == "hybrid" else 10).to_arrow()

    rows = []
    for mode in ("vector", "bm25", "hybrid"):
        for filtered in (False, True):
            where = "file_type = 'pdf'" if filtered else None
            for q, v in list(zip(queries, vectors))[:20]:
                run(mode, q, v, where)
            samples = []
            for q, v in zip(queries, vectors):
                t = time.perf_counter()
                run(mode, q, v, where)
                samples.append((time.perf_counter() - t) * 1000)
            p50, p95 = percentiles(samples)
            rows.append(
                {
                    "engine": "lancedb-native",
                    "size": size,
                    "mode": mode,
                    "filtered": filtered,
                    "p50_ms": p50,
                    "p95_ms": p95,
                    "filter": where or "",
                }
            )
    return rows


def measure_cold(store: Path, size: int, query: str, runs: int = 3) -> dict:
    env = {**os.environ, "QUARRY_EMBED_BACKEND": "hash", "QUARRY_EMBED_DIM": str(DIM), "LANCEDB_LOG": "error"}
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "quarry.cli.main", "search", query, "--db", str(store), "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        samples.append((time.perf_counter() - t) * 1000)
        if proc.returncode != 0:
            log(f"  cold search failed: {proc.stderr.strip()[-500:]}")
            break
    return {
        "engine": "quarry",
        "size": size,
        "mode": "hybrid-cold-process",
        "filtered": False,
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(max(samples), 1),
        "runs": len(samples),
        "embed_backend": "hash",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated chunk counts")
    ap.add_argument("--queries", type=int, default=200, help="queries per measurement")
    ap.add_argument("--vector-search", default="auto", choices=["auto", "exact", "ivf", "binary"])
    ap.add_argument("--skip-native", action="store_true", help="do not measure LanceDB's native search")
    ap.add_argument("--skip-cold", action="store_true", help="do not time a cold `quarry search` process")
    ap.add_argument("--rebuild", action="store_true", help="rebuild cached stores")
    ap.add_argument(
        "--reindex",
        action="store_true",
        help="rebuild only the search index of cached stores (after a change to quarry/retrieval)",
    )
    ap.add_argument(
        "--reindex-dense",
        action="store_true",
        help="rebuild only the vector files of cached stores (after a change to quarry/retrieval/dense.py)",
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    args = ap.parse_args()
    import numpy as np

    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    sents = sentences()
    rng = np.random.default_rng(7)
    queries = make_queries(args.queries, sents, rng)
    qvecs = rng.standard_normal((len(queries), DIM), dtype=np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    results, stores = [], {}
    for size in sizes:
        folder, info = ensure_store(size, sents, args.rebuild)
        if args.reindex:
            info["index"] = reindex(folder / "store")
        elif args.reindex_dense:
            info["index"] = reindex_dense(folder / "store")
        stores[size] = info
        store = folder / "store"
        log(f"measuring {size} chunks ...")
        results += measure_quarry(store, size, queries, qvecs, args.vector_search)
        if not args.skip_native:
            results += measure_native(folder, store, size, queries, qvecs)
        if not args.skip_cold:
            results.append(measure_cold(store, size, queries[1]))
    out = {
        "results": results,
        "stores": stores,
        "queries": len(queries),
        "k": 10,
        "candidates": 50,
        "machine": machine(),
    }
    write_json(RESULTS / "query_latency.json", out)
    table = [
        f"{'engine':<15} {'size':>8} {'mode':<20} {'filtered':<8} {'p50 ms':>8} {'p95 ms':>8} {'p50 cpu':>8} "
        f"{'p95 cpu':>8} {'load':>5}"
    ]
    for r in results:
        table.append(
            f"{r['engine']:<15} {r['size']:>8} {r['mode']:<20} {str(r['filtered']):<8} "
            f"{r['p50_ms']:>8} {r['p95_ms']:>8} {r.get('p50_cpu_ms', ''):>8} {r.get('p95_cpu_ms', ''):>8} "
            f"{r.get('load', ''):>5}"
        )
    print("\n".join(table), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
