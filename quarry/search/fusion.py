"""Fusion of the retrievers' candidate lists: score-normalised convex combination (default) and
reciprocal rank fusion.

``tmm`` (the default): each retriever's scores are normalised by the *theoretical* min-max of
Bruch, Gai and Ingber (An Analysis of Fusion Functions for Hybrid Retrieval, ACM TOIS 2023):
``(s - floor_r) / (max_q - floor_r)`` with ``max_q`` the query's best score and ``floor_r`` the
lowest score the retriever can give (cosine -1, BM25 0), so a weak list is not stretched to
``[0, 1]`` the way per-query min-max does. The fused score is the convex combination
``Σ_r w_r(q) · norm_r(d)``; a candidate one retriever did not return gets that retriever's
lowest normalised score among its candidates (it fell below that retriever's cut-off), or 0
when that retriever returned fewer than ``depth`` candidates (it found nothing more: BM25 with
no query term in the chunk).

The weights can adapt per query (``adapt > 0``): each retriever's base weight (``vector``
:data:`TMM_ALPHA`, ``bm25`` ``1 - TMM_ALPHA``) is multiplied by its *peak* raised to ``adapt``:
how far its best few candidates stand above the rest of its list,
``(mean(top PEAK_TOP) - mean(all)) / (max - min)``, a query-performance predictor in the family
of Shtok et al.'s normalised query commitment (NQC, ACM TOIS 2012), and the weights are
renormalised to sum to 1.

``TMM_ALPHA = 0.85`` and ``TMM_ADAPT = 0`` were chosen on SciFact's *train* queries only
(bench/quality.py: α from 0 to 1 by 0.05 × adapt 0, 0.5, 1, 1.5, 2); every adaptation strength
scored below fixed weights there, so adaptation ships off. Nothing was tuned on test queries.

``rrf``: for each candidate ``d`` and each retriever ``r`` that returned it at 1-based rank
``rank_r(d)``: ``score(d) = Σ_r weight_r / (k + rank_r(d))`` (Cormack, Clarke and Buettcher,
2009; ``k = 60``).

Ties are broken by the best single rank, then by id, so the same query always gives the same
order.

Each method is registered in :data:`FUSIONS` (quarry/core/registry.py) as a function
``(hits, *, k, weights, alpha, adapt, depth) -> [(id, fused)]`` with its properties:
``normalised=True`` when its fused scores share TMM's 0–1 scale, so that the document evidence
(:func:`with_documents`) can be added to them. A plugin adds a method the same way
(entry point group ``quarry.fusions``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar, overload

from quarry.core.registry import FUSIONS

__all__ = [
    "DEFAULT_FUSION",
    "DEFAULT_K",
    "DOC_WEIGHT",
    "FLOORS",
    "FUSIONS",
    "TMM_ADAPT",
    "TMM_ALPHA",
    "fuse",
    "normalise",
    "normalised",
    "peak",
    "rrf",
    "tmm",
    "tmm_weights",
    "with_documents",
]

DEFAULT_K = 60
DEFAULT_FUSION = "tmm"
# The lowest score each retriever can give: cosine similarity, and BM25 (a sum of non-negative
# term weights). A retriever not listed here is normalised by its list's own minimum.
FLOORS = {"vector": -1.0, "bm25": 0.0}
TMM_ALPHA = 0.85  # base weight of the vector retriever; bm25 gets 1 - TMM_ALPHA
TMM_ADAPT = 0.0  # exponent of the per-query peak; 0 = fixed weights
PEAK_TOP = 3
# weight of the document evidence (with_documents) added to TMM's fused scores: chosen on the train
# questions of three long-PDF sets together (bench/longpdf.py; docs/query.md says how)
DOC_WEIGHT = 0.1

Scored = Sequence[tuple[Hashable, float]]
H = TypeVar("H", bound=Hashable)  # what is ranked: a row id of the index, a chunk id in the benches


def rrf(
    rankings: Mapping[str, Sequence[Hashable]],
    k: int = DEFAULT_K,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[Hashable, float]]:
    """Fuse ranked id lists (best first) into ``[(id, fused score)]``, best first."""
    scores: dict = {}
    best: dict = {}
    for name, ids in rankings.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))


def peak(scores: Sequence[float], top: int = PEAK_TOP) -> float:
    """How far the best ``top`` scores of a list (best first) stand above the list's mean, as a
    share of its range: 0 for a flat list, at most 1. A list of one or two scores counts as 1/2."""
    n = len(scores)
    if n <= top:
        return 0.5
    hi, lo = scores[0], min(scores)
    if hi <= lo:
        return 0.0
    head = sum(scores[:top]) / top
    return (head - sum(scores) / n) / (hi - lo)


def tmm_weights(
    hits: Mapping[str, Scored],
    weights: Mapping[str, float] | None = None,
    alpha: float = TMM_ALPHA,
    adapt: float = TMM_ADAPT,
) -> dict[str, float]:
    """The convex weights of this query's retrievers (summing to 1): base weight × the caller's
    ``weights`` (default 1) × ``peak ** adapt``. Retrievers with no candidates get none."""
    base = {"vector": alpha, "bm25": 1.0 - alpha}
    raw = {}
    for name, items in hits.items():
        if not items:
            continue
        w = base.get(name, 0.5) * (1.0 if weights is None else weights.get(name, 1.0))
        if adapt:
            w *= max(peak([s for _, s in items]), 1e-6) ** adapt
        raw[name] = w
    total = sum(raw.values())
    if total <= 0:  # every weight 0: fall back to equal weights rather than an arbitrary order
        return {name: 1.0 / len(raw) for name in raw} if raw else {}
    return {name: w / total for name, w in raw.items()}


def tmm(
    hits: Mapping[str, Scored],
    weights: Mapping[str, float] | None = None,
    alpha: float = TMM_ALPHA,
    adapt: float = TMM_ADAPT,
    floors: Mapping[str, float] = FLOORS,
    depth: int | None = None,
) -> list[tuple[Hashable, float]]:
    """Fuse scored lists ``{retriever: [(id, raw score)]}`` (best first) by a convex combination
    of theoretically min-max normalised scores; returns ``[(id, fused score)]``, best first, every
    fused score in ``[0, 1]``."""
    w = tmm_weights(hits, weights, alpha, adapt)
    norms: dict[str, dict] = {}
    missing: dict[str, float] = {}
    best: dict = {}
    for name in w:
        norms[name], missing[name] = normalise(name, hits[name], floors, depth)
        for rank, (item, _) in enumerate(hits[name], start=1):
            best[item] = min(best.get(item, rank), rank)
    fused = {item: sum(weight * norms[name].get(item, missing[name]) for name, weight in w.items()) for item in best}
    return sorted(fused.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))


def normalise(name: str, items: Scored, floors: Mapping[str, float], depth: int | None) -> tuple[dict, float]:
    """``({id: normalised score}, score of an id the list lacks)`` for one retriever's non-empty list:
    TMM's theoretical min-max normalisation (see the module's docstring)."""
    lowest = min(s for _, s in items)
    floor = min(floors.get(name, lowest), lowest)
    span = items[0][1] - floor
    norms = {item: ((s - floor) / span if span > 0 else 1.0) for item, s in items}
    return norms, (min(norms.values()) if depth is None or len(items) >= depth else 0.0)


@FUSIONS.register("tmm", normalised=True)
def _tmm(hits: Mapping[str, Scored], *, k: int, weights, alpha: float, adapt: float, depth: int | None):
    return tmm(hits, weights, alpha, adapt, depth=depth)


@FUSIONS.register("rrf", normalised=False)
def _rrf(hits: Mapping[str, Scored], *, k: int, weights, alpha: float, adapt: float, depth: int | None):
    return rrf({name: [item for item, _ in items] for name, items in hits.items()}, k=k, weights=weights)


def fuse(
    hits: Mapping[str, Sequence[tuple[H, float]]],
    method: str = DEFAULT_FUSION,
    *,
    k: int = DEFAULT_K,
    weights: Mapping[str, float] | None = None,
    alpha: float = TMM_ALPHA,
    adapt: float = TMM_ADAPT,
    depth: int | None = None,
) -> list[tuple[H, float]]:
    """Fuse scored lists ``{retriever: [(id, raw score)]}`` (best first) by ``method`` (a name of
    :data:`FUSIONS`); ``k`` is RRF's constant, ``alpha``/``adapt``/``depth`` TMM's settings
    (``depth``: how many candidates each retriever was asked for)."""
    if method not in FUSIONS:
        raise ValueError(f"unknown fusion {method!r}; choose one of {', '.join(FUSIONS)}")
    return FUSIONS.get(method)(hits, k=k, weights=weights, alpha=alpha, adapt=adapt, depth=depth)


def normalised(method: str) -> bool:
    """Whether ``method``'s fused scores are on TMM's 0–1 scale (the document evidence adds to those)."""
    return bool(FUSIONS.info(method).get("normalised"))


@overload
def with_documents(
    fused: Sequence[tuple[H, float]], doc_of: Mapping[H, int], doc_scores: Sequence[float], weight: float = ...
) -> list[tuple[H, float]]: ...


@overload
def with_documents(
    fused: Sequence[tuple[int, float]], doc_of: Sequence[int], doc_scores: Sequence[float], weight: float = ...
) -> list[tuple[int, float]]: ...


def with_documents(
    fused: Sequence[tuple[Any, float]],
    doc_of: Mapping[Any, int] | Sequence[int],
    doc_scores: Sequence[float],
    weight: float = DOC_WEIGHT,
) -> list[tuple[Any, float]]:
    """Add document evidence to fused chunk scores: ``score + weight · card(d) / max_q card``,
    ``card(d)`` the BM25 score of the chunk's document's card for this query
    (:mod:`quarry.retrieval.cards`), normalised by the best card's score, as TMM normalises BM25
    (floor 0, the query's maximum). A hierarchical prior in the spirit of Ogilvie and Callan's
    mixture of document fields (Combining Document Representations for Known-Item Search, SIGIR
    2003) and of parent-document retrieval: when a question names a document (a company and a
    fiscal year), chunks of that document rise; when no card matches, nothing changes.

    ``doc_of[item]``: the position in ``doc_scores`` of the item's document (negative: none).
    Returns ``[(item, score)]``, best first; ties keep the fused order."""
    best = max(doc_scores, default=0.0)
    if weight <= 0 or best <= 0:
        return list(fused)
    out = []
    for item, score in fused:
        d = doc_of[item]
        out.append((item, score + weight * doc_scores[d] / best if d >= 0 else score))
    order = sorted(range(len(out)), key=lambda i: -out[i][1])
    return [out[i] for i in order]
