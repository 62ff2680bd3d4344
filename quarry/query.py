"""The query module: hybrid search over a committed index. Never imports Prefect.

``Index`` keeps its connections and model; before each call it checks the commit pointer
and moves to a newer committed state when one exists, so a long-lived reader follows
re-indexing without ever seeing a half-written run.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from quarry.embedders import describe, get_embedder
from quarry.errors import ModelMismatch, UsageError
from quarry.fusion import DEFAULT_K, rrf
from quarry.settings import Settings, store_path
from quarry.sqlfiles import load_sql
from quarry.store.layout import POINTER
from quarry.store.reader import Snapshot, open_snapshot
from quarry.textnorm import bm25_text

MODES = ("hybrid", "vector", "bm25")


@dataclass
class SearchResult:
    """One hit. ``scores``/``ranks`` hold each retriever's raw score and 1-based rank (None if
    that retriever did not return the chunk)."""

    rank: int
    score: float
    chunk_id: str
    doc_id: str
    path: str
    title: str
    section: str
    header: str
    text: str
    page_start: int | None
    page_end: int | None
    scores: dict[str, float | None] = field(default_factory=dict)
    ranks: dict[str, int | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchResponse:
    query: str
    mode: str
    results: list[SearchResult]

    def to_dict(self) -> dict:
        return {"query": self.query, "mode": self.mode, "results": [r.to_dict() for r in self.results]}


class Index:
    """A read-only handle on a store. Use :func:`open`."""

    def __init__(self, store: Path, settings: Settings | None = None):
        self.store = store
        self.settings = settings or Settings.from_env()
        self._snap: Snapshot | None = None
        self._pointer_stat: tuple[int, int] | None = None
        self._query_cache: dict[str, object] = {}

    # --- snapshot management ---------------------------------------------------------------

    def _current_stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.store / POINTER)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    @property
    def snapshot(self) -> Snapshot:
        stat = self._current_stat()
        if self._snap is None or stat != self._pointer_stat:
            old = self._snap
            self._snap = open_snapshot(self.store)
            self._pointer_stat = stat
            if old is not None:
                old.close()
        return self._snap

    def close(self) -> None:
        if self._snap is not None:
            self._snap.close()
            self._snap = None

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- retrieval ---------------------------------------------------------------------------

    def _embed_query(self, query: str):
        snap = self.snapshot
        model, dim = describe(self.settings)
        if (model, dim) != (snap.pointer.model, snap.pointer.dim) and dim:
            raise ModelMismatch(
                f"the index at {self.store} was built with {snap.pointer.model} ({snap.pointer.dim}-d); "
                f"these settings embed with {model} ({dim}-d): use the same model or re-index"
            )
        if query not in self._query_cache:
            if len(self._query_cache) > 100_000:
                self._query_cache.clear()
            self._query_cache[query] = get_embedder(self.settings).embed([query])[0]
        return self._query_cache[query]

    def prime_queries(self, queries: list[str], batch: int = 64) -> None:
        """Embed many queries in batches ahead of searching them (evaluation, bulk search)."""
        todo = [q.strip() for q in dict.fromkeys(queries) if q.strip() and q.strip() not in self._query_cache]
        if not todo:
            return
        self._embed_query(todo[0])  # checks the model against the index once
        embedder = get_embedder(self.settings)
        for i in range(0, len(todo), batch):
            part = todo[i : i + batch]
            for q, vec in zip(part, embedder.embed(part)):
                self._query_cache[q] = vec

    def vector_search(self, query: str, n: int) -> list[tuple[str, float]]:
        """Top-``n`` chunk ids by cosine similarity, with the similarity."""
        table = self.snapshot.table
        if table is None:
            return []
        vec = self._embed_query(query)
        rows = (
            table.search(vec, vector_column_name="vector")
            .distance_type("cosine")
            .select(["chunk_id"])
            .limit(n)
            .to_arrow()
        )
        ids = rows.column("chunk_id").to_pylist()
        dists = rows.column("_distance").to_pylist()
        hits = [(i, 1.0 - d) for i, d in zip(ids, dists)]
        return sorted(hits, key=lambda h: (-h[1], h[0]))

    def bm25_search(self, query: str, n: int) -> list[tuple[str, float]]:
        """Top-``n`` chunk ids by BM25 over header + text."""
        terms = bm25_text(query)
        if not terms:
            return []
        con = self.snapshot.con
        return [(cid, float(s)) for cid, s in con.execute(load_sql("bm25_search"), [terms, n]).fetchall()]

    def search(
        self,
        query: str,
        k: int = 10,
        mode: str = "hybrid",
        candidates: int | None = None,
        rrf_k: int = DEFAULT_K,
    ) -> SearchResponse:
        """Search the committed index.

        ``hybrid`` takes each retriever's top ``candidates`` (default ``max(50, 5k)``) and fuses
        them by reciprocal rank fusion (see :mod:`quarry.fusion`); ``vector`` and ``bm25``
        return one retriever's ranking in the same result shape.
        """
        if mode not in MODES:
            raise UsageError(f"unknown search mode {mode!r}; choose one of {', '.join(MODES)}")
        if k < 1:
            raise UsageError("k must be at least 1")
        query = query.strip()
        if not query:
            raise UsageError("the query is empty")
        pool = candidates or max(50, 5 * k)
        hits: dict[str, list[tuple[str, float]]] = {}
        if mode in ("hybrid", "vector"):
            hits["vector"] = self.vector_search(query, pool if mode == "hybrid" else k)
        if mode in ("hybrid", "bm25"):
            hits["bm25"] = self.bm25_search(query, pool if mode == "hybrid" else k)
        if mode == "hybrid":
            fused = rrf({name: [cid for cid, _ in h] for name, h in hits.items()}, k=rrf_k)[:k]
        else:
            fused = hits[mode][:k]
        return SearchResponse(query, mode, self._hydrate(fused, hits))

    def _hydrate(self, fused, hits) -> list[SearchResult]:
        ids = [cid for cid, _ in fused]
        if not ids:
            return []
        cols = ["chunk_id", "doc_id", "path", "title", "section", "header", "text", "page_start", "page_end"]
        rows = {r[0]: dict(zip(cols, r)) for r in self.snapshot.con.execute(load_sql("hydrate_chunks"), [ids]).fetchall()}
        info = {name: {cid: (rank, score) for rank, (cid, score) in enumerate(h, start=1)} for name, h in hits.items()}
        results = []
        for cid, score in fused:
            row = rows.get(cid)
            if row is None:
                continue  # the vector table and catalog disagree; never show a half row
            scores = {name: info.get(name, {}).get(cid, (None, None))[1] for name in ("vector", "bm25")}
            ranks = {name: info.get(name, {}).get(cid, (None, None))[0] for name in ("vector", "bm25")}
            results.append(SearchResult(rank=len(results) + 1, score=float(score), scores=scores, ranks=ranks, **row))
        return results

    # --- catalog views -------------------------------------------------------------------------

    def status(self) -> dict:
        """Counts, the embedding model and dimension, and the last run."""
        snap = self.snapshot
        docs, sections, chunks, size = snap.con.execute(load_sql("status")).fetchone()
        last = self.runs(limit=1)
        return {
            "store": str(self.store),
            "documents": docs,
            "sections": sections,
            "chunks": chunks,
            "bytes": int(size),
            "model": snap.pointer.model,
            "dim": snap.pointer.dim,
            "generation": snap.pointer.generation,
            "vector_table": snap.pointer.vector_table,
            "vector_version": snap.pointer.vector_version,
            "last_run": last[0] if last else None,
        }

    def runs(self, limit: int = 50) -> list[dict]:
        """Index runs, newest first."""
        cur = self.snapshot.con.execute(load_sql("list_runs"), [limit])
        cols = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            item = dict(zip(cols, row))
            for key in ("roots", "errors", "durations", "settings"):
                item[key] = json.loads(item[key]) if item.get(key) else None
            for key in ("started", "finished"):
                item[key] = item[key].isoformat() + "Z" if item.get(key) else None
            out.append(item)
        return out


def open(db: str | os.PathLike | None = None, settings: Settings | None = None) -> Index:  # noqa: A001
    """Open the index at ``db`` (default ``$QUARRY_DB`` or ``./.quarry``) for searching."""
    index = Index(store_path(db), settings)
    index.snapshot  # noqa: B018 - fail now, with a clear message, if there is no index
    return index
