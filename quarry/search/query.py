"""The query module: hybrid search over a committed index. Never imports Prefect.

``Index`` keeps its catalog connection, the memory-mapped search index of the committed
generation (:mod:`quarry.retrieval.searchindex`), the embedding model, query embeddings, stems and filter
masks. Before each call it checks the commit pointer and moves to a newer committed state when
one exists, so a long-lived reader follows re-indexing without ever seeing a half-written run.

A search: the query is embedded (cached) and tokenised; a filter, if any, becomes a boolean
mask over rows (one DuckDB query, cached per generation); each retriever takes its top
``candidates`` among the rows the mask keeps; score fusion (:mod:`quarry.search.fusion`) merges them; the top ``k``
are read back from the catalog.

The rooms around it: the result types (:mod:`quarry.search.results`), following commits
(:mod:`quarry.search.follower`), the caller's arguments (:mod:`quarry.search.arguments`), the
store's runs and index summary (:mod:`quarry.store.views`), SQL (:mod:`quarry.search.sql`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from quarry.core.environment import environment
from quarry.core.errors import ModelMismatch, NotFound, UsageError
from quarry.core.models import FUSION_WEIGHTS, RETRIEVERS, SEARCH_MODES
from quarry.core.principals import caller
from quarry.core.settings import Settings
from quarry.core.sqlfiles import load_sql
from quarry.ingest.embedders import describe, describe_backend, get_embedder
from quarry.retrieval.dense import METHODS as VECTOR_SEARCH
from quarry.retrieval.rows import COLUMNS as ROW_COLUMNS
from quarry.search import relevance
from quarry.search.arguments import reranker_of, segment_params, short_id
from quarry.search.collapse import POOL_FACTOR as COLLAPSE_POOL
from quarry.search.collapse import candidates as collapse_candidates
from quarry.search.collapse import collapse as collapse_duplicates
from quarry.search.filters import Filter, with_filter
from quarry.search.follower import LRU, Follower
from quarry.search.fusion import DEFAULT_FUSION, DEFAULT_K, DOC_WEIGHT, fuse, normalised, with_documents
from quarry.search.parameters import SEARCH, WINDOW, check
from quarry.search.rerank import DEFAULT_CANDIDATES as DEFAULT_RERANK_CANDIDATES
from quarry.search.rerank import Reranker
from quarry.search.results import SearchResponse, SearchResult
from quarry.search.segments import RseParams, segments_from_results
from quarry.search.windows import ChunkReader, expand
from quarry.store import views
from quarry.store.fts import summary as fts_status
from quarry.store.handle import Store, as_store, open_store
from quarry.store.layers import attach_sql
from quarry.store.reader import Snapshot

if TYPE_CHECKING:
    from quarry.search.export import ExportReport  # imported when exporting: pyarrow stays off the query path

__all__ = [
    "Index",
    "SearchResponse",
    "SearchResult",
    "open",
    "MODES",
    "RETRIEVERS",
    "VECTOR_SEARCH",
    "DEFAULT_RERANK_CANDIDATES",
]

MODES = SEARCH_MODES


class Index:
    """A read-only handle on a store. Use :func:`open`.

    ``vector_search`` (default ``$QUARRY_VECTOR_SEARCH`` or ``auto``) picks how vectors are
    searched: ``auto`` (IVF when the store has an IVF index, built from 20,000 chunks, unless a
    filter keeps so few rows that exact search over them is cheaper), ``exact``, ``ivf`` or
    ``binary`` (sign-bit Hamming candidates re-scored exactly; see :mod:`quarry.retrieval.binaryvec`).
    See :mod:`quarry.retrieval.dense`.
    """

    def __init__(
        self,
        store: Store | Path,
        settings: Settings | None = None,
        *,
        vector_search: str | None = None,
        cache_size: int = 10_000,
        principals=None,
    ):
        vector_search = vector_search or environment().vector_search
        if vector_search not in VECTOR_SEARCH:
            raise UsageError(f"unknown vector search {vector_search!r}; choose one of {', '.join(VECTOR_SEARCH)}")
        self._store = as_store(store)
        self.store = self._store.folder  # the folder it reads (a remote store's local cache)
        self.settings = settings or Settings.from_env()
        self.vector_search_method = vector_search
        # who this handle reads as: None = everything (the store's owner); a list of principals
        # restricts every call, on top of what a call's own ``principals=`` asks
        self.principals = None if principals is None else caller(principals)
        self._query_cache = LRU(cache_size)  # query text -> embedding
        self._masks = LRU(64)  # (generation, Filter) -> (mask, rows kept)
        self._doc_masks = LRU(64)  # (generation, Filter) -> documents the filter keeps a row of
        self._model_checked: tuple | None = None
        self._follower = Follower(self._store, on_change=self._forget_masks)

    # --- snapshot management: quarry/search/follower.py -----------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        """The committed state this index reads now; moves to a newer one after a commit. Inside a
        call, the snapshot that call pinned."""
        return self._follower.current

    @property
    def generation(self) -> int:
        """The committed generation a call made now reads."""
        return self.snapshot.pointer.generation

    def pinned(self):
        """Keep one snapshot for this thread's calls inside the block (nested blocks allowed): what
        they read comes from one committed generation, whatever commits meanwhile."""
        return self._follower.pinned()

    _pinned = pinned

    def _forget_masks(self) -> None:
        self._masks.clear()
        self._doc_masks.clear()

    def chunk_reader(self) -> ChunkReader:
        """Chunk positions and rows of the current generation, for windows and segments."""
        return ChunkReader(self.snapshot.con)

    def close(self) -> None:
        """Close the catalog connection and unmap the index files (calls in flight keep theirs
        until they end)."""
        self._follower.close()

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
        if filters and filters.restricted and not snap.has_principals:
            filters = filters.without_permissions()  # a catalog from before principals: all public
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

    def _document_mask(self, filters: Filter, snap: Snapshot, mask):
        """A bool per document row of the search index: whether the filter keeps a row of it."""
        key = (snap.pointer.generation, filters)
        hit = self._doc_masks.get(key)
        if hit is None:
            cards = snap.index.cards
            assert cards is not None  # asked for only when the index has document cards
            hit = cards.doc_mask(mask)
            self._doc_masks.put(key, hit)
        return hit

    def access_filter(self, principals=None) -> Filter | None:
        """The permission filter of a call made with ``principals`` (None: no restriction of its
        own), on top of this handle's (:attr:`principals`); None when neither restricts."""
        out = None
        for who in (self.principals, principals):
            if who is not None:
                access = Filter.readable_by(who)
                out = access if out is None else out & access
        return out

    def _effective(self, filters: Filter | str | None, principals) -> Filter | None:
        """The user's filter and the caller's permissions, as one filter (None: neither)."""
        if isinstance(filters, str):
            filters = Filter.build(where=[filters])
        access = self.access_filter(principals)
        if access is None:
            return filters or None
        return filters & access if filters else access

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

    def vector_search(
        self, query: str, n: int, filters: Filter | None = None, principals=None
    ) -> list[tuple[str, float]]:
        """Top-``n`` chunk ids by cosine similarity, with the similarity."""
        with self._pinned() as snap:
            mask, kept = self.filter_mask(self._effective(filters, principals), snap)
            rows, scores = self._vector_rows(snap, query, n, mask, kept)
            return list(zip(snap.index.chunk_ids(rows), map(float, scores)))

    def bm25_search(
        self, query: str, n: int, filters: Filter | None = None, principals=None
    ) -> list[tuple[str, float]]:
        """Top-``n`` chunk ids by BM25 over header + text (see :mod:`quarry.retrieval.bm25`)."""
        with self._pinned() as snap:
            mask, _ = self.filter_mask(self._effective(filters, principals), snap)
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
        principals=None,
        collapse: bool = True,
    ) -> SearchResponse:
        """Search the committed index: what ``quarry search`` does, flag for keyword. Each argument is
        checked against its declaration in :mod:`quarry.search.parameters`, whose limits ``quarry
        search``, ``POST /v1/search`` and the MCP tool hold too: a value outside them is a
        :class:`UsageError`.

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
        generation (``response.generation``), whatever commits meanwhile.

        ``principals``: who the caller is (``["user:alice", "group:hr"]``; ``public`` is implied).
        Only documents one of them may read are searched: the permission check is part of the
        filter both retrievers apply before they pick candidates, so a document the caller may not
        read never takes a place among the ``k``, a window or a segment. None: no restriction
        beyond the handle's own (``quarry.open(db, principals=...)``).

        ``collapse`` (default): copies of a passage (the same normalised text, or a near-duplicate
        document's matching chunk) take one place, the best-ranked hit listing the others in
        ``copies``; the ranking reaches ``3k`` deep so that ``k`` distinct passages remain
        (:mod:`quarry.search.collapse`; a rerank's or segments' pool is deep already). It runs after
        the rerank, before segments and the cut to ``k``.
        """
        # every argument checked once, against its declaration (quarry/search/parameters.py)
        args = check(
            SEARCH,
            query=query,
            k=k,
            mode=mode,
            candidates=candidates,
            fusion=fusion,
            rrf_k=rrf_k,
            weights=weights,
            min_scores=min_scores,
            rerank_candidates=rerank_candidates,
            window=window,
        )
        k, candidates, rerank_candidates, before_after = (
            args[n] for n in ("k", "candidates", "rerank_candidates", "window")
        )
        reranker = reranker_of(rerank)
        params = segment_params(segments)
        if before_after is not None and params is not None:
            raise UsageError("window and segments are alternatives; give one of them")
        if params is not None:
            pool = rerank_candidates if reranker else max(k, params.results)
            candidates = candidates or max(pool, 50)
        else:
            pool = max(k, rerank_candidates) if reranker else k
        if collapse and reranker is None and params is None:
            # deeper, so that k distinct passages remain; each retriever's candidates as for k alone
            candidates = max(50, 5 * pool) if candidates is None else candidates
            pool = max(pool, COLLAPSE_POOL * k)
        with self._pinned():
            response = self._ranked(
                query,
                pool,
                args["mode"],
                candidates=candidates,
                rrf_k=args["rrf_k"],
                fusion=args["fusion"],
                weights=args["weights"],
                min_scores=args["min_scores"],
                filters=self._effective(filters, principals),
            )
            if reranker is not None:
                t = time.perf_counter()
                response.results = reranker.rerank(response.query, response.results)
                response.timings["rerank"] = _ms(t)
            if collapse:
                t = time.perf_counter()
                response.results = self._collapsed(response.results, self._effective(filters, principals))
                response.timings["collapse"] = _ms(t)
            if params is not None:
                t = time.perf_counter()
                response.segments = segments_from_results(self, response.results, params)
                response.timings["segments"] = _ms(t)
            response.results = response.results[:k]
            response.weak = relevance.weak(r.match for r in response.results)
            if before_after is not None:
                t = time.perf_counter()
                response.windows = expand(self, response.results, *before_after)
                response.timings["window"] = _ms(t)
        return response

    def _collapsed(self, results: list[SearchResult], filters) -> list[SearchResult]:
        """One hit per passage (:func:`quarry.search.collapse.collapse`) over the pinned snapshot."""
        snap = self.snapshot
        if isinstance(filters, str):
            filters = Filter.build(where=[filters])
        if filters and filters.restricted and not snap.has_principals:
            filters = filters.without_permissions() or None
        if not snap.has_signals:  # a catalog from before the corpus signals: nothing to collapse by
            return results
        keys = snap.memo.get("collapse")
        if keys is None:  # once per committed generation (quarry/search/collapse.py)
            keys = snap.memo.setdefault("collapse", collapse_candidates(snap.con))
        return collapse_duplicates(snap.con, results, filters, environment().dup_threshold, keys=keys)

    def _ranked(
        self,
        query: str,
        k: int,
        mode: str,
        *,
        candidates: int | None,
        rrf_k: int,
        fusion: str,
        weights: dict[str, float],
        min_scores: dict[str, float],
        filters: Filter | str | None,
    ) -> SearchResponse:
        """The top ``k`` of one retriever, or of the fused retrievers in ``hybrid`` mode; the arguments
        are :meth:`search`'s, checked."""
        timings: dict[str, float] = {}
        t_start = time.perf_counter()
        weights = {**dict.fromkeys(FUSION_WEIGHTS, 1.0), **weights}
        if isinstance(filters, str):
            filters = Filter.build(where=[filters])
        query = query.strip()
        pool = candidates or max(50, 5 * k)
        active = [r for r in RETRIEVERS if weights[r] > 0] if mode == "hybrid" else [mode]
        n = pool if mode == "hybrid" else k

        snap = self.snapshot
        t = time.perf_counter()
        mask, kept = self.filter_mask(filters, snap)
        timings["filter"] = _ms(t)
        rows = snap.index.live_rows
        if filters and filters.restricted:  # a caller who may not read everything is told of its own rows only
            rows = self.filter_mask(filters.permissions(), snap)[1]
        counts = {"rows": rows, "kept": kept}
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
            documents = weights["documents"] * DOC_WEIGHT if normalised(fusion) and snap.index.cards else 0.0
            # the document evidence counts only documents the filter keeps a row of: a document the
            # caller may not read (or filtered out) never moves the scores of the ones returned
            # (a mask comes only from a filter)
            keep = (
                self._document_mask(filters, snap, mask)
                if documents > 0 and mask is not None and filters is not None
                else None
            )
            fused = self._fuse(
                hits,
                k,
                fusion=fusion,
                rrf_k=rrf_k,
                weights=weights,
                depth=n,
                min_fused=min_scores.get("fused"),
                documents=(snap.index.cards, query, documents, keep) if documents > 0 else None,
            )
        else:
            fused = hits[mode][:k]
        timings["fuse"] = _ms(t)
        t = time.perf_counter()
        results = self._hydrate(snap, fused, hits, fused_scores=mode == "hybrid")
        timings["hydrate"] = _ms(t)
        t = time.perf_counter()
        self._match(snap, query, results, [row for row, _ in fused], hits, "vector" in active)
        timings["match"] = _ms(t)
        timings["total"] = _ms(t_start)
        return SearchResponse(
            query=query,
            mode=mode,
            results=results,
            generation=snap.pointer.generation,
            k=k,
            candidates=n if mode == "hybrid" else k,
            rrf_k=rrf_k,
            fusion=fusion if mode == "hybrid" else "",
            weights={r: weights[r] for r in (*active, *(["documents"] if documents > 0 else []))}
            if mode == "hybrid"
            else {},
            min_scores=min_scores,
            filter=str(filters) if filters else "",
            counts=counts,
            timings=timings,
            warnings=warnings,
        )

    def _query_fits(self, query: str) -> list[str]:
        """A warning when the embedding model reads only the start of ``query`` (BM25 reads all of it)."""
        embedder = get_embedder(self.settings)
        limit = getattr(embedder, "max_tokens", 0)
        if not limit or len(query) < 2 * limit:  # a token is at least one character: short queries fit
            return []
        try:
            tokens = embedder.count_tokens([query])[0]
        except Exception:  # noqa: BLE001 - a backend that cannot count says nothing rather than fail the search
            return []
        if tokens <= limit:
            return []
        return [
            f"the query is {tokens} model tokens long; the vector search reads only its first {limit} "
            f"(about {limit * 3 // 4} words), BM25 reads all of it"
        ]

    @staticmethod
    def _fuse(
        hits: dict[str, list[tuple[int, float]]],
        k: int,
        *,
        fusion: str,
        rrf_k: int,
        weights: dict[str, float],
        depth: int,
        min_fused: float | None,
        documents: tuple | None = None,
    ) -> list[tuple[int, float]]:
        """The top ``k`` ``(row, fused score)`` of the retrievers' ``(row, score)`` rankings
        (``depth``: how many candidates each retriever was asked for); ``documents`` =
        ``(cards, query, weight, keep)`` adds the document evidence of :func:`with_documents`
        (``keep``: the documents the search's filter keeps, or None for all)."""
        fused = fuse(hits, fusion, k=rrf_k, weights={r: weights[r] for r in RETRIEVERS}, depth=depth)
        if documents is not None:
            from quarry.retrieval.bm25 import query_tokens

            cards, query, weight, keep = documents
            doc_of, doc_scores = cards.evidence([row for row, _ in fused], query_tokens(query), keep)
            fused = with_documents(fused, doc_of, doc_scores, weight)
        if min_fused is not None:
            fused = [(row, s) for row, s in fused if s >= min_fused]
        return fused[:k]

    def _hydrate(self, snap: Snapshot, fused, hits, fused_scores: bool) -> list[SearchResult]:
        fields = snap.index.results.fields([row for row, _ in fused])
        info = {name: {row: (rank, score) for rank, (row, score) in enumerate(h, start=1)} for name, h in hits.items()}
        results: list[SearchResult] = []
        for data, (row, score) in zip(fields, fused):
            scores = {name: info.get(name, {}).get(row, (None, None))[1] for name in RETRIEVERS}
            ranks = {name: info.get(name, {}).get(row, (None, None))[0] for name in RETRIEVERS}
            results.append(
                SearchResult(
                    rank=len(results) + 1,
                    score=float(score),
                    fused=float(score) if fused_scores else None,
                    scores=scores,
                    ranks=ranks,
                    **data,
                )
            )
        return results

    def _match(
        self,
        snap: Snapshot,
        query: str,
        results: list[SearchResult],
        rows: list[int],
        hits: dict[str, list[tuple[int, float]]],
        vector: bool,
    ) -> None:
        """Fill each result's ``match``: the query words its chunk holds with its BM25 score, and its
        cosine when the vector retriever ran, whether or not a retriever ranked it (scores of rows
        a retriever did not return are computed for these rows only). ``bm25`` mode never embeds
        the query: its hits have no cosine."""
        import numpy as np

        from quarry.retrieval.bm25 import query_tokens

        if not results:
            return
        toks = query_tokens(query)
        at = np.asarray(rows, dtype=np.int64)
        held = snap.index.bm25.holds(toks, at)
        bm25 = dict(hits.get("bm25", ()))
        todo = sorted({row for row, h in zip(rows, held) if h.any() and row not in bm25})
        if todo:
            bm25.update(zip(todo, snap.index.bm25.exact_scores(toks, np.asarray(todo, dtype=np.int64)).tolist()))
        cosine = dict(hits.get("vector", ())) if vector else {}
        todo = [row for row in rows if vector and row not in cosine]
        if todo:  # the query's embedding is cached by now
            vec = self._embed_query(query, snap)
            cosine.update(zip(todo, snap.index.dense.cosines(vec, np.asarray(todo, dtype=np.int64)).tolist()))
        for result, row, h in zip(results, rows, held):
            result.match = {
                "bm25": relevance.bm25_match(toks, h.tolist(), bm25.get(row, 0.0)),
                "vector": relevance.vector_match(cosine.get(row)),
            }

    # --- answers: quarry/search/answer.py ---------------------------------------------------------

    def answer(
        self,
        question: str,
        *,
        k: int = 8,
        mode: str = "hybrid",
        filters: Filter | str | None = None,
        principals=None,
        model: str | None = None,
        max_context_tokens: int | None = None,
        history=None,
        style: str = "auto",
        runtime=None,
    ):
        """Answer ``question`` with checked citations from what ``principals`` may read: what
        ``quarry ask`` does. Returns an :class:`~quarry.search.answer.Answer` (see that module)."""
        from quarry.search.answer import answer

        return answer(
            self,
            question,
            k=k,
            mode=mode,
            filters=filters,
            principals=principals,
            model=model,
            max_context_tokens=max_context_tokens,
            history=history,
            style=style,
            runtime=runtime,
        )

    def answer_events(self, question: str, **kwargs):
        """:meth:`answer` as it happens: ``("evidence", ...)``, ``("token", text)``..., ``("answer", Answer)``."""
        from quarry.search.answer import answer_events

        return answer_events(self, question, **kwargs)

    # --- catalog views -------------------------------------------------------------------------

    def status(self, principals=None) -> dict:
        """Counts, the embedding model and dimension, the last run and the store's size on disk
        (``disk_bytes``). With ``principals`` (or a restricted handle), the counts are of the
        documents the caller may read, and the store's location, size, last run (whose rows name
        files) and search index summary (rows, segments and terms of every document) are left out."""
        with self._pinned() as snap:
            access = self.access_filter(principals)
            if access is not None and snap.has_principals:
                sql, params = with_filter(load_sql("status_readable"), access)
                docs, sections, chunks, size = snap.con.execute(sql, params).fetchone()
            else:
                docs, sections, chunks, size = snap.con.execute(load_sql("status")).fetchone()
            info = {
                "store": self._store.name,
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
                "search_index": None,  # admin only: filled in below
                # DuckDB's full-text tables (match_bm25 in quarry sql): ready, building, missing or off
                "full_text": fts_status(self.store, snap.pointer.generation, self.settings.duckdb_fts),
                "embedder": describe_backend(self.settings),
                "last_run": None,
            }
            if access is not None:
                # the search index's rows, segments and terms count every document, readable or not,
                # so a restricted caller gets no summary (and none is computed for it)
                for key in (
                    "store",
                    "catalog",
                    "catalog_attach",
                    "full_text",
                    "vector_table",
                    "vector_version",
                    "embedder",
                    "last_run",
                    "search_index",
                ):
                    info.pop(key)
            else:
                from quarry.store.layout import disk_usage

                info["search_index"] = self._index_summary(snap)
                last = self.runs(limit=1)
                info["last_run"] = last[0] if last else None
                info["last_evals"] = self.evals(latest=True)
                info["disk_bytes"] = disk_usage(self._store)
            return info

    @staticmethod
    def _index_summary(snap) -> dict | None:
        """The search index in ``status``: :func:`quarry.store.views.index_summary`, its terms the
        whole index's vocabulary (the manifest's are its newest segment's; counted once per loaded
        generation)."""
        if snap.index_manifest is None:
            return None
        summary = views.index_summary(snap.index_manifest)
        summary["terms"] = snap.index.bm25.vocabulary_size()
        return summary

    def document(self, doc_id: str, principals=None, *, text: tuple[int, int] | None = None) -> dict:
        """One document: its catalog row (metadata, principals), its sections and its chunks' ids and
        spans, read from one generation; its page layout (``page_offsets``, ``ocr_page_numbers``), the
        ``warnings`` its run recorded, and the ``failures`` of later runs that could not read its file
        again (the stored version stays). With ``text=(first, last)``, chunks ``first`` to ``last``
        (inclusive) also carry their ``header`` and ``text``. :class:`NotFound` when there is no such
        document or the caller may not read it (the two look the same)."""
        with self._pinned() as snap:
            sql, params = with_filter(load_sql("document_view"), self._readable(snap, principals))
            cur = snap.con.execute(sql, [str(doc_id), *params])
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no document {short_id(doc_id)} in this index")
            out = dict(zip([d[0] for d in cur.description], row))
            out["metadata"] = json.loads(out["metadata"]) if out.get("metadata") else {}
            for key in ("mtime", "indexed_at"):
                out[key] = out[key].isoformat() + "Z" if out.get(key) else None
            if self.access_filter(principals) is None:  # who else may read it is the owner's business
                out["principals"] = list(out["principals"]) if out.get("principals") is not None else None
            else:
                out.pop("principals")
            cur = snap.con.execute(load_sql("document_sections"), [str(doc_id)])
            out["sections"] = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
            cur = snap.con.execute(load_sql("document_chunks"), [str(doc_id)])
            out["chunks"] = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
            if text is not None:
                first, last = text
                rows = snap.con.execute(load_sql("document_chunk_text"), [str(doc_id), int(first), int(last)])
                by_index = {i: (header, body) for i, header, body in rows.fetchall()}
                for item in out["chunks"]:
                    if item["chunk_index"] in by_index:
                        item["header"], item["text"] = by_index[item["chunk_index"]]
            out.update(page_offsets=[], ocr_page_numbers=[], warnings=[])
            if "warnings" in snap.document_columns:
                layout = snap.con.execute(load_sql("document_layout"), [str(doc_id)]).fetchone()
                for key, value in zip(("page_offsets", "ocr_page_numbers", "warnings"), layout):
                    out[key] = list(value or [])
            indexed = out["indexed_at"].removesuffix("Z") if out.get("indexed_at") else "1970-01-01"
            cur = snap.con.execute(load_sql("document_failures"), [out["path"], indexed])
            out["failures"] = [
                {"run_id": run_id, "started": started.isoformat() + "Z", "error": error}
                for run_id, started, error in cur.fetchall()
            ]
            out["generation"] = snap.pointer.generation
            return out

    def chunk(self, chunk_id: str, neighbours: int | tuple[int, int] = 0, principals=None) -> dict:
        """One chunk: text, header, section, page span; with ``neighbours`` (``n`` or ``(before,
        after)``), the chunks around it in its document as a window (``"window"``, the shape of
        ``search(window=)``'s). :class:`NotFound` when there is no such chunk or the caller may not
        read its document."""
        before_after = WINDOW.check(neighbours) if neighbours else None
        with self._pinned() as snap:
            sql, params = with_filter(load_sql("chunk_view"), self._readable(snap, principals))
            cur = snap.con.execute(sql, [str(chunk_id), *params])
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no chunk {short_id(chunk_id)} in this index")
            out = dict(zip([d[0] for d in cur.description], row))
            out["generation"] = snap.pointer.generation
            if before_after is not None and before_after != (0, 0):
                hit = SearchResult(
                    rank=1,
                    score=0.0,
                    **{k: out[k] for k in ROW_COLUMNS},
                )
                windows = expand(self, [hit], *before_after)
                out["window"] = windows[0].to_dict() if windows else None
            return out

    def _readable(self, snap: Snapshot, principals) -> Filter | None:
        access = self.access_filter(principals)
        if access is not None and not snap.has_principals:
            return None  # a catalog from before principals: every document is public
        return access

    def export(
        self,
        out: str | os.PathLike,
        fmt: str = "parquet",
        *,
        vectors: bool = False,
        filters: Filter | str | None = None,
        batch_rows: int | None = None,
        overwrite: bool = False,
        principals=None,
        redact=(),
    ) -> ExportReport:
        """Write documents, sections and chunks of the committed generation to the folder ``out``
        as ``parquet`` or ``jsonl`` files: what ``quarry export`` does (see :mod:`quarry.search.export`).
        With ``principals``, only what the caller may read; ``redact``: PII kinds masked in the text."""
        from quarry.search.export import BATCH_ROWS, export_snapshot

        with self._pinned() as snap:
            filters = self._effective(filters, principals)
            if filters and filters.restricted and not snap.has_principals:
                filters = filters.without_permissions() or None
            return export_snapshot(
                snap,
                out,
                fmt,
                vectors=vectors,
                filters=filters,
                batch_rows=BATCH_ROWS if batch_rows is None else batch_rows,
                overwrite=overwrite,
                redact=redact,
            )

    def corpus_report(self) -> dict:
        """Duplicates by folder, bytes saved, languages, PII by kind, boilerplate per root: what
        ``quarry corpus report`` prints (:mod:`quarry.search.corpus`). The owner's view: it counts
        every document."""
        from quarry.search.corpus import report

        with self._pinned() as snap:
            if not snap.has_signals:
                raise UsageError(
                    f"the store at {self.store} was indexed before corpus signals existed: "
                    "run quarry index --full to compute them"
                )
            return {"generation": snap.pointer.generation, **report(snap.con)}

    def sql(self, query: str, limit: int | None = None):
        """Run read-only SQL on the committed catalog: what ``quarry sql`` does (see
        :mod:`quarry.search.sql`). Returns a :class:`~quarry.search.sql.SqlResult`."""
        from quarry.search.sql import run_sql

        with self._pinned() as snap:
            return run_sql(
                snap.con, query, snap.pointer.generation, limit, store=self.store, full_text=self.settings.duckdb_fts
            )

    def runs(self, limit: int = 50) -> list[dict]:
        """Index runs, newest first, with skipped runs the next commit has yet to record."""
        return views.runs(self.snapshot.con, self._store, limit)

    def evals(self, set_name: str | None = None, *, latest: bool = False) -> list[dict]:
        """The store's evaluation rows (``quarry eval``), oldest first; ``latest``: only the newest row of
        each (set, mode, k)."""
        from quarry.store import evals

        items = evals.rows(self._store, set_name)
        if latest:
            newest: dict[tuple, dict] = {}
            for item in items:
                newest[(item.get("set_name"), item.get("mode"), item.get("k"))] = item
            items = list(newest.values())
        return items

    def run(self, run_id: str) -> dict:
        """One index run by id (a skipped run the next commit has yet to record included), as
        :meth:`runs` lists it; :class:`NotFound` when there is none."""
        found = views.run(self.snapshot.con, self._store, run_id)
        if found is None:
            raise NotFound(f"no run {short_id(run_id)} in this index")
        return found


def open(db: str | os.PathLike | Store | None = None, settings: Settings | None = None, **kwargs) -> Index:
    """Open the index at ``db`` (a folder, a store URL or an opened :class:`~quarry.store.handle.Store`;
    default ``$QUARRY_DB`` or ``./.quarry``) for searching.

    ``kwargs`` go to :class:`Index` (``vector_search``, ``cache_size``).
    """
    index = Index(open_store(db), settings, **kwargs)
    index.snapshot  # noqa: B018 - fail now, with a clear message, if there is no index
    return index


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
