"""The query module: hybrid search over a committed index. Never imports Prefect.

``Index`` keeps its catalog connection, the memory-mapped search index of the committed
generation (:mod:`quarry.retrieval.searchindex`), the embedding model, query embeddings, stems and filter
masks. Before each call it checks the commit pointer and moves to a newer committed state when
one exists, so a long-lived reader follows re-indexing without ever seeing a half-written run.

A search: the query is embedded (cached) and tokenised; a filter, if any, becomes a boolean
mask over rows (one DuckDB query, cached per generation); each retriever takes its top
``candidates`` among the rows the mask keeps; score fusion (:mod:`quarry.search.fusion`) merges them; the top ``k``
are read back from the catalog.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from quarry.core.errors import ModelMismatch, UsageError
from quarry.core.models import FUSION_WEIGHTS, RETRIEVERS, SEARCH_MODES, RunReport
from quarry.core.settings import Settings, store_path
from quarry.core.sqlfiles import load_sql
from quarry.retrieval.dense import METHODS as VECTOR_SEARCH
from quarry.ingest.embedders import describe, describe_backend, get_embedder
from quarry.search.filters import Filter
from quarry.search.fusion import DEFAULT_FUSION, DEFAULT_K, DOC_WEIGHT, FUSIONS, fuse, with_documents
from quarry.search.rerank import DEFAULT_CANDIDATES as DEFAULT_RERANK_CANDIDATES
from quarry.search.rerank import Reranker, get_reranker
from quarry.search.segments import RseParams, Segment, get_params, segments_from_results
from quarry.search.windows import ChunkReader, Window, expand, parse_window
from quarry.store.layers import attach_sql
from quarry.store.layout import POINTER
from quarry.store.reader import Snapshot, open_snapshot
from quarry.store.remote import check_seconds, remote_of

if TYPE_CHECKING:
    from quarry.search.export import ExportReport  # imported when exporting: pyarrow stays off the query path

__all__ = ["Index", "SearchResponse", "SearchResult", "open", "MODES", "RETRIEVERS", "VECTOR_SEARCH",
           "DEFAULT_RERANK_CANDIDATES"]

MODES = SEARCH_MODES


@dataclass
class SearchResult:
    """One hit.

    ``score`` is what the results are ranked by: the fused score in ``hybrid`` mode, the
    retriever's own score otherwise. ``fused`` is the fused score (None outside ``hybrid``).
    ``scores``/``ranks`` hold each retriever's raw score and 1-based rank among its candidates
    (None where that retriever did not return the chunk), for ``--explain``.
    """

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
    chunk_index: int = 0
    section_index: int = 0
    file_type: str = ""
    start_char: int = 0
    end_char: int = 0
    fused: float | None = None
    scores: dict[str, float | None] = field(default_factory=dict)
    ranks: dict[str, int | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchResponse:
    """The results and the settings that produced them (``filter`` is the filter in words,
    ``timings`` milliseconds per stage, ``counts`` candidates per retriever and rows the filter
    kept)."""

    query: str
    mode: str
    results: list[SearchResult]
    k: int = 10
    candidates: int = 0
    rrf_k: int = DEFAULT_K
    fusion: str = DEFAULT_FUSION
    weights: dict[str, float] = field(default_factory=dict)
    min_scores: dict[str, float] = field(default_factory=dict)
    filter: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    windows: list[Window] | None = None  # with search(..., window=): the results widened, best first
    segments: list[Segment] | None = None  # with search(..., segments=): relevant segments, best first
    warnings: list[str] = field(default_factory=list)  # what the search could not do as asked

    def to_dict(self) -> dict:
        """Plain data for JSON; ``windows``/``segments`` only when they were asked for."""
        out = asdict(self)
        for name in ("windows", "segments"):
            if out[name] is None:
                del out[name]
        return out


class _LRU(OrderedDict):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):
        if key in self:
            self.move_to_end(key)
            return self[key]
        return default

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


class Index:
    """A read-only handle on a store. Use :func:`open`.

    ``vector_search`` (default ``$QUARRY_VECTOR_SEARCH`` or ``auto``) picks how vectors are
    searched: ``auto`` (IVF when the store has an IVF index, built from 20,000 chunks, unless a
    filter keeps so few rows that exact search over them is cheaper), ``exact``, ``ivf`` or
    ``binary`` (sign-bit Hamming candidates re-scored exactly; see :mod:`quarry.retrieval.binaryvec`).
    See :mod:`quarry.retrieval.dense`.
    """

    def __init__(self, store: Path, settings: Settings | None = None, *, vector_search: str | None = None,
                 cache_size: int = 10_000):
        vector_search = vector_search or os.environ.get("QUARRY_VECTOR_SEARCH") or "auto"
        if vector_search not in VECTOR_SEARCH:
            raise UsageError(f"unknown vector search {vector_search!r}; choose one of {', '.join(VECTOR_SEARCH)}")
        self.store = store
        self.settings = settings or Settings.from_env()
        self.vector_search_method = vector_search
        self._snap: Snapshot | None = None
        self._pointer_stat: tuple[int, int] | None = None
        self._query_cache = _LRU(cache_size)  # query text -> embedding
        self._masks = _LRU(64)  # (generation, Filter) -> (mask, rows kept)
        self._model_checked: tuple | None = None
        self._pins = 0  # while > 0 the snapshot stays put (one search, one generation)

    # --- snapshot management ---------------------------------------------------------------

    def _current_stat(self) -> tuple[int, int] | None:
        remote = remote_of(self.store)
        if remote is not None:  # one GET of the remote CURRENT; a new generation is downloaded once
            remote.pull(self.store, max_age=check_seconds())
        try:
            st = os.stat(self.store / POINTER)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    @property
    def snapshot(self) -> Snapshot:
        """The committed state this index reads now; moves to a newer one after a commit."""
        if self._snap is not None and self._pins:
            return self._snap
        stat = self._current_stat()
        if self._snap is None or stat != self._pointer_stat:
            old = self._snap
            self._snap = open_snapshot(self.store)
            self._pointer_stat = stat
            self._masks.clear()
            if old is not None:
                old.close()
        return self._snap

    @contextmanager
    def _pinned(self) -> Iterator[Snapshot]:
        """Keep the current snapshot for the calls inside the block (nested blocks allowed)."""
        snap = self.snapshot
        self._pins += 1
        try:
            yield snap
        finally:
            self._pins -= 1

    def chunk_reader(self) -> ChunkReader:
        """Chunk positions and rows of the current generation, for windows and segments."""
        return ChunkReader(self.snapshot.con)

    def close(self) -> None:
        """Close the catalog connection and unmap the index files."""
        if self._snap is not None:
            self._snap.close()
            self._snap = None

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- query preparation -------------------------------------------------------------------

    def _check_model(self, snap: Snapshot) -> None:
        key = (snap.pointer.model, snap.pointer.dim)
        if self._model_checked == key:
            return
        model, dim = describe(self.settings)
        if (model, dim) != key and dim:
            raise ModelMismatch(
                f"the index at {self.store} was built with {snap.pointer.model} ({snap.pointer.dim}-d); "
                f"these settings embed with {model} ({dim}-d): use the same model or re-index"
            )
        self._model_checked = key

    def _embed_query(self, query: str, snap: Snapshot | None = None):
        self._check_model(snap or self.snapshot)
        vec = self._query_cache.get(query)
        if vec is None:
            vec = get_embedder(self.settings).embed([query])[0]
            self._query_cache.put(query, vec)
        return vec

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
                self._query_cache.put(q, vec)

    def filter_mask(self, filters: Filter | None, snap: Snapshot | None = None):
        """``(mask, rows kept)`` for a filter: a bool per row of the current generation's search
        index (its row space, deleted rows included), or ``(None, live rows)`` without a filter.
        Cached per generation and filter."""
        snap = snap or self.snapshot
        n_rows = snap.index.n_rows
        if not filters:
            return None, snap.index.live_rows
        key = (snap.pointer.generation, filters)
        hit = self._masks.get(key)
        if hit is not None:
            return hit
        import numpy as np

        where, params = filters.bound_sql()
        snap.chunk_rows()  # the temporary view the filter query numbers rows with
        sql = load_sql("filter_rows").replace("TRUE /* filter */", where)
        try:
            rows = snap.con.execute(sql, params).fetchnumpy()["row_id"]
        except Exception as exc:  # a value DuckDB cannot compare with the column, say
            import duckdb

            if isinstance(exc, duckdb.Error):
                raise UsageError(f"filter {filters}: {exc}") from exc
            raise
        mask = np.zeros(n_rows, dtype=bool)
        mask[np.asarray(rows, dtype=np.int64)] = True
        result = (mask, int(len(rows)))
        self._masks.put(key, result)
        return result

    # --- retrieval ---------------------------------------------------------------------------

    # Each search takes the snapshot once and passes it down: a commit during the search must
    # not mix rows of two generations.

    def _vector_rows(self, snap: Snapshot, query: str, n: int, mask, kept: int):
        vec = self._embed_query(query, snap)
        return snap.index.dense.search(vec, n, mask, method=self.vector_search_method, kept=kept)

    def _bm25_rows(self, snap: Snapshot, query: str, n: int, mask):
        """BM25 over the query's terms: textnorm tokens, stop words dropped, Porter-stemmed
        (tokens the corpus contains map straight to their term; others are stemmed)."""
        from quarry.retrieval.bm25 import query_tokens

        return snap.index.bm25.search_tokens(query_tokens(query), n, mask)

    def vector_search(self, query: str, n: int, filters: Filter | None = None) -> list[tuple[str, float]]:
        """Top-``n`` chunk ids by cosine similarity, with the similarity."""
        snap = self.snapshot
        mask, kept = self.filter_mask(filters, snap)
        rows, scores = self._vector_rows(snap, query, n, mask, kept)
        return list(zip(snap.index.chunk_ids(rows), map(float, scores)))

    def bm25_search(self, query: str, n: int, filters: Filter | None = None) -> list[tuple[str, float]]:
        """Top-``n`` chunk ids by BM25 over header + text (see :mod:`quarry.retrieval.bm25`)."""
        snap = self.snapshot
        mask, _ = self.filter_mask(filters, snap)
        rows, scores = self._bm25_rows(snap, query, n, mask)
        return list(zip(snap.index.chunk_ids(rows), map(float, scores)))

    def search(
        self,
        query: str,
        k: int = 10,
        mode: str = "hybrid",
        *,
        candidates: int | None = None,
        rrf_k: int = DEFAULT_K,
        fusion: str = DEFAULT_FUSION,
        weights: dict[str, float] | None = None,
        min_scores: dict[str, float] | None = None,
        filters: Filter | str | None = None,
        rerank: str | Reranker | None = None,
        rerank_candidates: int = DEFAULT_RERANK_CANDIDATES,
        segments: str | RseParams | None = None,
        window: tuple[int, int] | int | str | None = None,
    ) -> SearchResponse:
        """Search the committed index: what ``quarry search`` does, flag for keyword.

        ``hybrid`` takes each retriever's top ``candidates`` (default ``max(50, 5k)``) and fuses
        them by ``fusion``: ``tmm`` (default), a convex combination of theoretically min-max
        normalised scores, or ``rrf``, reciprocal rank fusion ``Σ weight_r / (rrf_k + rank_r)``
        (see :mod:`quarry.search.fusion`); ``vector`` and ``bm25`` return one retriever's top
        ``k`` in the same result shape.

        ``weights``: per retriever (``vector``, ``bm25``; default 1.0 each), multiplying RRF's
        terms or TMM's tuned convex weights; a weight of 0 skips that retriever. With ``tmm``,
        ``documents`` (default 1.0) multiplies the weight of the document evidence added to the
        fused scores (:func:`~quarry.search.fusion.with_documents`: chunks of the documents whose
        cards (path, company, type, period, fiscal year) match the query rise); 0 turns it off. ``min_scores``: drop a retriever's candidates scoring below its value
        (cosine for ``vector``, BM25 for ``bm25``) before fusion, and fused results below
        ``fused``. ``filters``: a :class:`~quarry.search.filters.Filter` (or a ``--where`` string),
        applied inside both retrievers before they pick candidates. Ties are broken by the best
        single rank, then by chunk id.

        The later stages run in this order, each on what the one before left:

        1. ``rerank``: a spec (``"llm"``, ``"llm:MODEL"``, ``"cross-encoder:/path"``; see
           :mod:`quarry.search.rerank`) or any object with ``rerank(query, results)``. It sees
           ``max(k, rerank_candidates)`` fused results (``rerank_candidates`` with ``segments``);
        2. ``segments``: a preset (``"balanced"``, ``"precision"``, ``"find_all"``) or
           :class:`~quarry.search.segments.RseParams`: relevant segment extraction over the whole
           (reranked) pool, in ``response.segments``. Without a rerank the pool is the top
           ``max(k, params.results)`` results;
        3. the results are cut to the top ``k``;
        4. ``window``: ``(before, after)`` chunks (an int for both sides, or ``"B,A"``) around each
           of the ``k`` results, merged where they meet, in ``response.windows``.

        ``window`` and ``segments`` are alternatives. Every stage reads the same committed
        generation, whatever commits meanwhile.
        """
        if k < 1:
            raise UsageError("k must be at least 1")
        reranker = _reranker(rerank)
        params = _segment_params(segments)
        before_after = _window(window)
        if before_after is not None and params is not None:
            raise UsageError("window and segments are alternatives; give one of them")
        if rerank_candidates < 1:
            raise UsageError(f"rerank_candidates must be at least 1, got {rerank_candidates}")
        if params is not None:
            pool = rerank_candidates if reranker else max(k, params.results)
            candidates = candidates or max(pool, 50)
        else:
            pool = max(k, rerank_candidates) if reranker else k
        with self._pinned():
            response = self._ranked(query, pool, mode, candidates=candidates, rrf_k=rrf_k, fusion=fusion, weights=weights,
                                    min_scores=min_scores, filters=filters)
            if reranker is not None:
                t = time.perf_counter()
                response.results = reranker.rerank(response.query, response.results)
                response.timings["rerank"] = _ms(t)
            if params is not None:
                t = time.perf_counter()
                response.segments = segments_from_results(self, response.results, params)
                response.timings["segments"] = _ms(t)
            response.results = response.results[:k]
            if before_after is not None:
                t = time.perf_counter()
                response.windows = expand(self, response.results, *before_after)
                response.timings["window"] = _ms(t)
        return response

    def _ranked(self, query: str, k: int, mode: str, *, candidates: int | None, rrf_k: int, fusion: str,
                weights: dict[str, float] | None, min_scores: dict[str, float] | None,
                filters: Filter | str | None) -> SearchResponse:
        """The top ``k`` of one retriever, or of the fused retrievers in ``hybrid`` mode."""
        timings: dict[str, float] = {}
        t_start = time.perf_counter()
        if mode not in MODES:
            raise UsageError(f"unknown search mode {mode!r}; choose one of {', '.join(MODES)}")
        if k < 1:
            raise UsageError("k must be at least 1")
        if candidates is not None and candidates < 1:
            raise UsageError("candidates must be at least 1")
        if rrf_k < 0:
            raise UsageError("rrf_k must be 0 or more")
        if fusion not in FUSIONS:
            raise UsageError(f"unknown fusion {fusion!r}; choose one of {', '.join(FUSIONS)}")
        weights = {**{r: 1.0 for r in FUSION_WEIGHTS}, **_checked("weights", weights, FUSION_WEIGHTS)}
        if any(w < 0 for w in weights.values()):
            raise UsageError(f"weights must be 0 or more, got {weights}")
        min_scores = _checked("min_scores", min_scores, (*RETRIEVERS, "fused"))
        if isinstance(filters, str):
            filters = Filter.build(where=[filters])
        query = query.strip()
        if not query:
            raise UsageError("the query is empty")
        pool = candidates or max(50, 5 * k)
        active = [r for r in RETRIEVERS if weights[r] > 0] if mode == "hybrid" else [mode]
        n = pool if mode == "hybrid" else k

        snap = self.snapshot
        t = time.perf_counter()
        mask, kept = self.filter_mask(filters, snap)
        timings["filter"] = _ms(t)
        counts = {"rows": snap.index.live_rows, "kept": kept}
        hits = {}
        warnings = []
        for name in active:
            t = time.perf_counter()
            if name == "vector":
                warnings += self._query_fits(query)
                rows, scores = self._vector_rows(snap, query, n, mask, kept)
            else:
                rows, scores = self._bm25_rows(snap, query, n, mask)
            if name in min_scores:
                keep = scores >= min_scores[name]
                rows, scores = rows[keep], scores[keep]
            hits[name] = list(zip(rows.tolist(), scores.tolist()))
            counts[name] = len(rows)
            timings[name] = _ms(t)

        t = time.perf_counter()
        documents = 0.0
        if mode == "hybrid":
            documents = weights["documents"] * DOC_WEIGHT if fusion == "tmm" and snap.index.cards else 0.0
            fused = self._fuse(hits, k, fusion=fusion, rrf_k=rrf_k, weights=weights, depth=n,
                               min_fused=min_scores.get("fused"),
                               documents=(snap.index.cards, query, documents) if documents > 0 else None)
        else:
            fused = hits[mode][:k]
        timings["fuse"] = _ms(t)
        t = time.perf_counter()
        results = self._hydrate(snap, fused, hits, fused_scores=mode == "hybrid")
        timings["hydrate"] = _ms(t)
        timings["total"] = _ms(t_start)
        return SearchResponse(
            query=query, mode=mode, results=results, k=k, candidates=n if mode == "hybrid" else k, rrf_k=rrf_k,
            fusion=fusion if mode == "hybrid" else "",
            weights={r: weights[r] for r in (*active, *(["documents"] if documents > 0 else []))}
            if mode == "hybrid" else {}, min_scores=min_scores,
            filter=str(filters) if filters else "", counts=counts, timings=timings, warnings=warnings,
        )

    def _query_fits(self, query: str) -> list[str]:
        """A warning when the embedding model reads only the start of ``query`` (BM25 reads all of it)."""
        embedder = get_embedder(self.settings)
        limit = getattr(embedder, "max_tokens", 0)
        if not limit or len(query) < 2 * limit:  # a token is at least one character: short queries fit
            return []
        try:
            tokens = embedder.count_tokens([query])[0]
        except Exception:  # a backend that cannot count says nothing rather than fail the search
            return []
        if tokens <= limit:
            return []
        return [f"the query is {tokens} model tokens long; the vector search reads only its first {limit} "
                f"(about {limit * 3 // 4} words), BM25 reads all of it"]

    @staticmethod
    def _fuse(hits: dict[str, list[tuple[int, float]]], k: int, *, fusion: str, rrf_k: int,
              weights: dict[str, float], depth: int, min_fused: float | None,
              documents: tuple | None = None) -> list[tuple[int, float]]:
        """The top ``k`` ``(row, fused score)`` of the retrievers' ``(row, score)`` rankings
        (``depth``: how many candidates each retriever was asked for); ``documents`` =
        ``(cards, query, weight)`` adds the document evidence of :func:`with_documents`."""
        fused = fuse(hits, fusion, k=rrf_k, weights={r: weights[r] for r in RETRIEVERS}, depth=depth)
        if documents is not None:
            from quarry.retrieval.bm25 import query_tokens

            cards, query, weight = documents
            doc_of, doc_scores = cards.evidence([row for row, _ in fused], query_tokens(query))
            fused = with_documents(fused, doc_of, doc_scores, weight)
        if min_fused is not None:
            fused = [(row, s) for row, s in fused if s >= min_fused]
        return fused[:k]

    def _hydrate(self, snap: Snapshot, fused, hits, fused_scores: bool) -> list[SearchResult]:
        fields = snap.index.results.fields([row for row, _ in fused])
        info = {name: {row: (rank, score) for rank, (row, score) in enumerate(h, start=1)} for name, h in hits.items()}
        results = []
        for data, (row, score) in zip(fields, fused):
            scores = {name: info.get(name, {}).get(row, (None, None))[1] for name in RETRIEVERS}
            ranks = {name: info.get(name, {}).get(row, (None, None))[0] for name in RETRIEVERS}
            results.append(SearchResult(rank=len(results) + 1, score=float(score),
                                        fused=float(score) if fused_scores else None,
                                        scores=scores, ranks=ranks, **data))
        return results

    # --- catalog views -------------------------------------------------------------------------

    def status(self) -> dict:
        """Counts, the embedding model and dimension, and the last run."""
        snap = self.snapshot
        docs, sections, chunks, size = snap.con.execute(load_sql("status")).fetchone()
        last = self.runs(limit=1)
        return {
            "store": str(remote.url) if (remote := remote_of(self.store)) else str(self.store),
            "documents": docs,
            "sections": sections,
            "chunks": chunks,
            "bytes": int(size),
            "model": snap.pointer.model,
            "dim": snap.pointer.dim,
            "generation": snap.pointer.generation,
            "catalog": str(self.store / snap.pointer.catalog),
            # what a plain DuckDB connection to `catalog` runs first to read a layered catalog
            "catalog_attach": attach_sql(self.store, snap.chain),
            "vector_table": snap.pointer.vector_table,
            "vector_version": snap.pointer.vector_version,
            "search_index": _index_summary(snap.index_manifest) if snap.index_manifest is not None else None,
            "embedder": describe_backend(self.settings),
            "last_run": last[0] if last else None,
        }

    def export(self, out: str | os.PathLike, fmt: str = "parquet", *, vectors: bool = False,
               filters: Filter | str | None = None, batch_rows: int | None = None,
               overwrite: bool = False) -> ExportReport:
        """Write documents, sections and chunks of the committed generation to the folder ``out``
        as ``parquet`` or ``jsonl`` files: what ``quarry export`` does (see :mod:`quarry.search.export`)."""
        from quarry.search.export import BATCH_ROWS, export_snapshot

        if isinstance(filters, str):
            filters = Filter.build(where=[filters])
        return export_snapshot(self.snapshot, out, fmt, vectors=vectors, filters=filters,
                               batch_rows=BATCH_ROWS if batch_rows is None else batch_rows, overwrite=overwrite)

    def sql(self, query: str, limit: int | None = None):
        """Run read-only SQL on the committed catalog: what ``quarry sql`` does (see
        :mod:`quarry.search.sql`). Returns a :class:`~quarry.search.sql.SqlResult`."""
        from quarry.search.sql import run_sql

        with self._pinned() as snap:
            return run_sql(snap.con, query, snap.pointer.generation, limit)

    def runs(self, limit: int = 50) -> list[dict]:
        """Index runs, newest first, with skipped runs the next commit has yet to record."""
        from quarry.store import journal

        cur = self.snapshot.con.execute(load_sql("list_runs"), [limit])
        cols = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            item = dict(zip(cols, row))
            for key in RunReport.json_fields():
                if isinstance(item.get(key), str):
                    item[key] = json.loads(item[key])
            for key in ("started", "finished"):
                item[key] = item[key].isoformat() + "Z" if item.get(key) else None
            out.append(item)
        known = {item["run_id"] for item in out}
        out += [row for row in journal.pending(self.store) if row.get("run_id") not in known]
        out.sort(key=lambda item: (item.get("started") or "", item.get("run_id") or ""), reverse=True)
        return out[:limit]


def open(db: str | os.PathLike | None = None, settings: Settings | None = None, **kwargs) -> Index:  # noqa: A001
    """Open the index at ``db`` (default ``$QUARRY_DB`` or ``./.quarry``) for searching.

    ``kwargs`` go to :class:`Index` (``vector_search``, ``cache_size``).
    """
    index = Index(store_path(db), settings, **kwargs)
    index.snapshot  # noqa: B018 - fail now, with a clear message, if there is no index
    return index


def _reranker(rerank) -> Reranker | None:
    """A reranker from a spec string or a ready object; None for no rerank."""
    if rerank is None or rerank == "":
        return None
    if isinstance(rerank, str):
        return get_reranker(rerank)
    if not callable(getattr(rerank, "rerank", None)):
        raise UsageError(f"rerank takes a spec (llm, llm:MODEL, cross-encoder:PATH) or an object with "
                         f"rerank(query, results), got {type(rerank).__name__}")
    return rerank


def _segment_params(segments) -> RseParams | None:
    """Segment parameters from a preset name or :class:`RseParams`; None for no segments."""
    if segments is None:
        return None
    if isinstance(segments, RseParams):
        return segments.validate()
    if isinstance(segments, str):
        return get_params(segments)
    raise UsageError(f"segments takes a preset name or RseParams, got {type(segments).__name__}")


def _window(window) -> tuple[int, int] | None:
    """``(before, after)`` from ``(b, a)``, one int for both sides, or ``"B,A"``; None for no window."""
    if window is None:
        return None
    if isinstance(window, int) and not isinstance(window, bool):
        window = (window, window)
    if isinstance(window, str):
        return parse_window(window)
    pair = tuple(window) if isinstance(window, (tuple, list)) else ()
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair):
        raise UsageError(f"window takes (before, after) as two non-negative integers, got {window!r}")
    return pair[0], pair[1]


def _checked(name: str, value: dict | None, allowed: tuple[str, ...]) -> dict[str, float]:
    if not value:
        return {}
    unknown = set(value) - set(allowed)
    if unknown:
        raise UsageError(f"{name}: unknown key {', '.join(sorted(unknown))}; use {', '.join(allowed)}")
    out = {}
    for key, v in value.items():
        try:
            out[key] = float(v)
        except (TypeError, ValueError):
            raise UsageError(f"{name}: {key} must be a number, got {v!r}") from None
        if not math.isfinite(out[key]):
            raise UsageError(f"{name}: {key} must be finite, got {v!r}")
    return out


def _index_summary(manifest: dict) -> dict:
    """The search index in ``quarry status``: live rows, segments (oldest first: generation and
    rows), rows deleted from them, and this generation's own segment (terms, IVF lists, build time)."""
    dense = manifest.get("dense") or {}
    segments = manifest.get("segments") or [{"generation": manifest.get("generation"), "rows": manifest.get("rows")}]
    return {"rows": manifest.get("rows"), "segments": [{"generation": s.get("generation"), "rows": s.get("rows")}
                                                       for s in segments],
            "deleted_rows": (manifest.get("deleted") or {}).get("rows", 0),
            "terms": (manifest.get("bm25") or {}).get("terms"),
            "ivf_lists": (dense.get("ivf") or {}).get("nlist"), "build_seconds": manifest.get("build_seconds")}


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
