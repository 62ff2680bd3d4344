"""The retrievers' document consensus: a fusion measured on long PDFs and BEIR (bench/longpdf.py,
bench/quality.py; docs/benchmarks.md) that did not beat quarry's default there, so it is kept here
with the benchmarks and not in the library."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from quarry.search.fusion import FLOORS, TMM_ADAPT, TMM_ALPHA, Scored, normalise, tmm_weights


def consensus(
    hits: Mapping[str, Scored],
    doc_of: Mapping[Hashable, int],
    weights: Mapping[str, float] | None = None,
    alpha: float = TMM_ALPHA,
    adapt: float = TMM_ADAPT,
    floors: Mapping[str, float] = FLOORS,
    depth: int | None = None,
) -> dict[int, float]:
    """The retrievers' agreement on *documents*: ``{document: score in [0, 1]}``, each document's
    best normalised score in each retriever's list (TMM's normalisation; a retriever that returned
    none of its chunks gives it what TMM gives a chunk it lacks), combined with TMM's convex
    weights. A document both retrievers place high — through the same chunk or through different
    ones (a table page found by BM25, the narrative around it by vector) — scores high; one that
    only one retriever likes gets that retriever's share. ``doc_of[item]``: the item's document
    (negative or absent: none)."""
    w = tmm_weights(hits, weights, alpha, adapt)
    best: dict[str, dict[int, float]] = {}
    missing: dict[str, float] = {}
    for name in w:
        norms, missing[name] = normalise(name, hits[name], floors, depth)
        per: dict[int, float] = {}
        for item, score in norms.items():
            d = doc_of.get(item, -1)
            if d >= 0 and score > per.get(d, -1.0):
                per[d] = score
        best[name] = per
    docs = {d for per in best.values() for d in per}
    return {d: sum(weight * best[name].get(d, missing[name]) for name, weight in w.items()) for d in docs}


def with_consensus(
    fused: Sequence[tuple[Hashable, float]],
    hits: Mapping[str, Scored],
    doc_of: Mapping[Hashable, int],
    weight: float,
    weights: Mapping[str, float] | None = None,
    alpha: float = TMM_ALPHA,
    adapt: float = TMM_ADAPT,
    depth: int | None = None,
) -> list[tuple[Hashable, float]]:
    """Add the retrievers' document consensus (:func:`consensus`) to fused chunk scores:
    ``score + weight · C(d) / max_q C``, ``d`` the chunk's document. A chunk standing alone in its
    document (a short file, an abstract) gets its own fused score back, scaled: the order of a
    collection of one-chunk documents does not change. Returns ``[(item, score)]``, best first;
    ties keep the fused order. Not part of the default search: measured on long PDFs
    (bench/longpdf.py, docs/benchmarks.md) it did not beat the default there."""
    if weight <= 0:
        return list(fused)
    docs = consensus(hits, doc_of, weights, alpha, adapt, depth=depth)
    best = max(docs.values(), default=0.0)
    if best <= 0:
        return list(fused)
    out = [(item, score + weight * docs.get(doc_of.get(item, -1), 0.0) / best) for item, score in fused]
    order = sorted(range(len(out)), key=lambda i: -out[i][1])
    return [out[i] for i in order]
