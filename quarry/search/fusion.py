"""Reciprocal rank fusion.

For each candidate ``d`` and each retriever ``r`` that returned it at 1-based rank
``rank_r(d)``::

    score(d) = sum_r  weight_r / (k + rank_r(d))

(Cormack, Clarke and Buettcher, 2009; ``k = 60`` by default). A retriever that did not
return ``d`` contributes nothing. Ties are broken by the best single rank, then by id, so
the same query always gives the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DEFAULT_K = 60


def rrf(
    rankings: Mapping[str, Sequence[str]],
    k: int = DEFAULT_K,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Fuse ranked id lists (best first) into ``[(id, fused score)]``, best first."""
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for name, ids in rankings.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))
