"""Relevant segment extraction (RSE, after dsRAG): contiguous runs of chunks worth reading whole.

A search ranks chunks; RSE turns the ranking into a value per chunk of each top document and
picks the contiguous runs with the largest total value:

1. **Documents.** The documents of the top ``top_k_for_document_selection`` results.
2. **Chunk values.** A retrieved chunk at 0-based rank ``r`` with relevance ``rel`` in [0, 1] is
   worth ``exp(-r / decay_rate) * rel - irrelevant_chunk_penalty``; every other chunk of those
   documents is worth ``-irrelevant_chunk_penalty``. With ``chunk_length_adjustment`` a retrieved
   chunk longer than ``reference_length`` characters has its value scaled by
   ``length / reference_length``.
3. **Segments.** Repeatedly take the non-overlapping run with the largest sum that starts and
   ends on a chunk of non-negative value, stays inside one document (bounded by the document's
   true chunk count, ``documents.n_chunks``), is at most ``max_length`` chunks long and fits in
   what is left of ``overall_max_length``; stop when the best run is worth less than
   ``minimum_value``.

Relevance (``relevance=``) is where quarry differs from dsRAG, whose values come from a
calibrated reranker. Fused RRF scores are not relevance, so quarry derives it from the
retrievers' own scores (see docs/query.md for the rationale):

- ``"scores"``: the mean over the retrievers that ran of each one's normalised score, cosine
  similarity clipped to [0, 1] for vectors and BM25 divided by the query's best BM25 score; a
  retriever that did not return the chunk contributes 0 (it fell below that retriever's cut-off);
- ``"rank"``: a constant 0.8 for every retrieved chunk, dsRAG's choice when absolute scores are
  meaningless (``NoReranker(ignore_absolute_relevance=True)``), so only rank decay matters;
- ``"rerank"``: the reranker's score (``scores["rerank"]``, in [0, 1]), dsRAG's own setting;
- ``"auto"`` (default): ``"rerank"`` when the results carry rerank scores, else ``"scores"``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Protocol

import numpy as np

from quarry.core.errors import UsageError
from quarry.core.models import RETRIEVERS
from quarry.search.windows import ChunkRun, Hit, build_span

RELEVANCE = ("auto", "scores", "rank", "rerank")
RANK_ONLY_RELEVANCE = 0.8  # dsRAG's default similarity when absolute relevance is ignored


@dataclass(frozen=True)
class RseParams:
    """Parameters of relevant segment extraction; lengths are counted in chunks."""

    max_length: int
    overall_max_length: int
    minimum_value: float
    irrelevant_chunk_penalty: float
    decay_rate: float
    top_k_for_document_selection: int
    chunk_length_adjustment: bool = True
    reference_length: int = 700  # characters; dsRAG's average chunk at an 800-character limit
    relevance: str = "auto"
    results: int = 200  # ranked chunks the values come from (dsRAG ranks 200 by default)

    def validate(self) -> RseParams:
        if self.max_length < 1 or self.overall_max_length < 1:
            raise UsageError("segment max_length and overall_max_length must be at least 1 chunk")
        if self.decay_rate <= 0:
            raise UsageError(f"decay_rate must be positive, got {self.decay_rate}")
        if self.top_k_for_document_selection < 1 or self.results < 1:
            raise UsageError("top_k_for_document_selection and results must be at least 1")
        if self.relevance not in RELEVANCE:
            raise UsageError(f"unknown relevance {self.relevance!r}; choose one of {', '.join(RELEVANCE)}")
        return self


# The presets of dsRAG's rse.py (RSE_PARAMS_PRESETS). find_all's minimum_value is 0.4 there.
PRESETS: dict[str, RseParams] = {
    "balanced": RseParams(
        max_length=15,
        overall_max_length=30,
        minimum_value=0.5,
        irrelevant_chunk_penalty=0.18,
        decay_rate=30,
        top_k_for_document_selection=10,
    ),
    "precision": RseParams(
        max_length=15,
        overall_max_length=30,
        minimum_value=0.7,
        irrelevant_chunk_penalty=0.2,
        decay_rate=30,
        top_k_for_document_selection=10,
    ),
    "find_all": RseParams(
        max_length=40,
        overall_max_length=200,
        minimum_value=0.4,
        irrelevant_chunk_penalty=0.18,
        decay_rate=200,
        top_k_for_document_selection=200,
    ),
}


@dataclass
class Segment(ChunkRun):
    """A contiguous run of chunks of one document (``first_chunk``..``last_chunk`` inclusive).

    ``score`` is the segment's value (the sum of its chunk values); ``hits`` the ranks of the
    search results inside it; ``rank`` the order in which RSE chose it (best first).
    """

    score: float
    hits: list[int] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def get_params(preset: str = "balanced", **overrides) -> RseParams:
    """A preset's parameters with ``overrides`` (any :class:`RseParams` field) applied."""
    if preset not in PRESETS:
        raise UsageError(f"unknown segment preset {preset!r}; choose one of {', '.join(PRESETS)}")
    known = {f.name for f in fields(RseParams)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise UsageError(f"unknown segment parameter {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return replace(PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}).validate()


# --- relevance and values ------------------------------------------------------------------


def relevance(results: Sequence, how: str = "auto") -> list[float]:
    """Relevance in [0, 1] of each result (see the module docstring for ``how``)."""
    if how == "auto":
        how = "rerank" if results and all(r.scores.get("rerank") is not None for r in results) else "scores"
    if how == "rank":
        return [RANK_ONLY_RELEVANCE] * len(results)
    if how == "rerank":
        missing = [r.rank for r in results if r.scores.get("rerank") is None]
        if missing:
            raise UsageError("relevance='rerank' needs reranked results (scores['rerank']); rerank them first")
        return [min(1.0, max(0.0, float(r.scores["rerank"]))) for r in results]
    ran = [name for name in RETRIEVERS if any(r.scores.get(name) is not None for r in results)]
    if not ran:
        return [0.0] * len(results)
    bm25_max = max((r.scores["bm25"] for r in results if r.scores.get("bm25") is not None), default=0.0)
    out = []
    for r in results:
        total = 0.0
        for name in ran:
            s = r.scores.get(name)
            if s is None:
                continue
            total += (
                min(1.0, max(0.0, float(s))) if name == "vector" else (float(s) / bm25_max if bm25_max > 0 else 0.0)
            )
        out.append(total / len(ran))
    return out


def chunk_value(rank0: int, rel: float, penalty: float, decay_rate: float) -> float:
    """dsRAG's value of a retrieved chunk at 0-based ``rank0`` with relevance ``rel``."""
    return math.exp(-rank0 / decay_rate) * rel - penalty


# --- the optimisation ------------------------------------------------------------------------


def best_segments(
    values: Sequence[Sequence[float] | np.ndarray], max_length: int, overall_max_length: int, minimum_value: float
) -> list[tuple[int, int, int, float]]:
    """Greedy best non-overlapping segments over documents' chunk values.

    ``values[d][i]`` is chunk ``i`` of document ``d``. Returns ``(d, start, end, value)`` with
    ``end`` exclusive, in the order chosen. A segment starts and ends on a chunk of value >= 0,
    is at most ``max_length`` long, never crosses a document, never overlaps a chosen one, and
    all segments together stay within ``overall_max_length`` chunks. Ties go to the earlier
    document, then the earlier start, then the shorter segment.
    """
    cand_doc, cand_start, cand_end, cand_value = [], [], [], []
    for d, vals in enumerate(values):
        arr = np.asarray(vals, dtype=np.float64)
        prefix = np.concatenate(([0.0], np.cumsum(arr)))
        ok = np.flatnonzero(arr >= 0)
        for first in ok:
            ends = ok[(ok >= first) & (ok < first + max_length)] + 1
            cand_doc.extend([d] * len(ends))
            cand_start.extend([int(first)] * len(ends))
            cand_end.extend(ends.tolist())
            cand_value.extend((prefix[ends] - prefix[first]).tolist())
    if not cand_value:
        return []
    doc = np.asarray(cand_doc)
    start = np.asarray(cand_start)
    end = np.asarray(cand_end)
    value = np.asarray(cand_value)
    alive = np.ones(len(value), dtype=bool)
    chosen: list[tuple[int, int, int, float]] = []
    total = 0
    while total < overall_max_length:
        usable = alive & (end - start <= overall_max_length - total)
        if not usable.any():
            break
        i = int(np.argmax(np.where(usable, value, -np.inf)))
        if value[i] < minimum_value:
            break
        d, s, e = int(doc[i]), int(start[i]), int(end[i])
        chosen.append((d, s, e, float(value[i])))
        total += e - s
        alive &= ~((doc == d) & (start < e) & (end > s))
    return chosen


# --- the search-facing API -------------------------------------------------------------------


class SegmentHit(Hit, Protocol):
    """What a segment reads of a search result (:class:`quarry.search.results.SearchResult`)."""

    @property
    def text(self) -> str: ...

    @property
    def section(self) -> str: ...


def segments_from_results(index, results: Sequence[SegmentHit], params: RseParams) -> list[Segment]:
    """RSE over an existing ranking (``results`` best first, e.g. reranked).

    ``index`` is an open :class:`quarry.search.query.Index` (anything with a ``chunk_reader()``);
    ``Index.search(..., segments=...)`` calls this for you, after any rerank.
    """
    if not results:
        return []
    reader = index.chunk_reader()
    pos = reader.locate(results)
    results = [r for r in results if r.chunk_id in pos]
    rels = relevance(results, params.relevance)

    docs: list[str] = []  # document order: by best rank, so ties favour better-ranked documents
    for r in results[: params.top_k_for_document_selection]:
        d = pos[r.chunk_id]["doc_id"]
        if d not in docs:
            docs.append(d)
    n_chunks = {pos[r.chunk_id]["doc_id"]: pos[r.chunk_id]["n_chunks"] for r in results}
    penalty = params.irrelevant_chunk_penalty
    values = {d: np.full(max(1, n_chunks[d]), -penalty) for d in docs}
    hit_at: dict[tuple[str, int], SegmentHit] = {}
    for rank0, (r, rel) in enumerate(zip(results, rels)):
        p = pos[r.chunk_id]
        if p["doc_id"] not in values:
            continue
        ci = p["chunk_index"]
        if ci >= len(values[p["doc_id"]]):
            continue  # n_chunks disagrees with the chunk table; trust the count
        v = chunk_value(rank0, rel, penalty, params.decay_rate)
        if params.chunk_length_adjustment:
            v *= max(len(r.text), params.reference_length) / params.reference_length
        values[p["doc_id"]][ci] = v
        hit_at[(p["doc_id"], ci)] = r

    picked = best_segments(
        [values[d] for d in docs], params.max_length, params.overall_max_length, params.minimum_value
    )
    rows = reader.ranges([(docs[d], s, e - 1) for d, s, e, _ in picked])
    meta = {pos[r.chunk_id]["doc_id"]: pos[r.chunk_id] for r in results}
    segments: list[Segment] = []
    for d, s, e, value in picked:
        doc_id = docs[d]
        if not rows.get(doc_id):
            continue
        span = build_span(rows[doc_id], s, e - 1)
        hits = sorted((hit_at[(doc_id, i)] for i in range(s, e) if (doc_id, i) in hit_at), key=lambda r: r.rank)
        section = hits[0].section if hits else (span["rows"][0]["section"] if span["rows"] else "")
        segments.append(
            Segment(
                rank=len(segments) + 1,
                doc_id=doc_id,
                path=meta[doc_id]["path"],
                title=meta[doc_id]["title"],
                section=section,
                header=span["header"],
                first_chunk=span["first_chunk"],
                last_chunk=span["last_chunk"],
                start_char=span["start_char"],
                end_char=span["end_char"],
                page_start=span["page_start"],
                page_end=span["page_end"],
                text=span["text"],
                score=value,
                hits=[h.rank for h in hits],
                chunk_ids=span["chunk_ids"],
            )
        )
    return segments


def relevant_segments(
    index,
    query: str,
    preset: str = "balanced",
    filters=None,
    *,
    mode: str = "hybrid",
    results: Sequence | None = None,
    search_kwargs: dict | None = None,
    **overrides,
) -> list[Segment]:
    """Search ``query`` and return the relevant segments a preset picks, best first.

    ``overrides`` are :class:`RseParams` fields (``max_length=20``, ``relevance="rank"``...).
    Pass ``results`` to run RSE over a ranking you already have (a reranked one, say); otherwise
    the top ``params.results`` chunks of a ``mode`` search are used, with ``filters`` (a
    :class:`quarry.search.filters.Filter`) and ``search_kwargs`` handed to :meth:`Index.search`.
    """
    params = get_params(preset, **overrides)
    if results is not None:
        return segments_from_results(index, results, params)
    kwargs = dict(search_kwargs or {})
    if filters is not None:
        kwargs["filters"] = filters
    return index.search(query, k=params.results, mode=mode, segments=params, **kwargs).segments
