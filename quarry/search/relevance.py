"""Whether a search found anything: each hit's evidence in its retrievers' own terms, and the
threshold under which an answer is *weak* (no hit really matched).

The fused score ranks hits within one answer but says nothing across answers: TMM divides by the
query's best score, so the first hit of any query scores about 1.0, noise included. Each
:class:`~quarry.search.results.SearchResult` therefore carries ``match``::

    {"bm25": {"terms": ["okapi"], "matched": 1, "of": 2, "score": 8.61} | None,
     "vector": {"cosine": 0.41} | None}

``bm25``: the query's BM25 words (:func:`quarry.retrieval.bm25.query_tokens`: stop words
dropped) that the chunk holds (same stem), how many of how many, and the chunk's BM25 score;
None when it holds none of them. ``vector``: the cosine of the query's and the chunk's
embeddings; None when the vector retriever did not run (``bm25`` mode, or its weight 0).

A hit is *strong* when either retriever vouches for it on its own: its cosine reaches
:data:`COSINE_STRONG`, or it holds at least :data:`TERMS_STRONG` of the query's words and at
least :data:`SHARE_STRONG` of them. An answer is ``weak`` when no hit is strong (and when it has
no hit). The thresholds were chosen on SciFact and Cranfield (``python bench/relevance.py``;
docs/benchmarks.md, "Weak answers"): real queries' judged-relevant hits against noise queries
(one set's queries asked of the other corpus, and strings of random words from the other
corpus).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["COSINE_STRONG", "TERMS_STRONG", "SHARE_STRONG", "bm25_match", "vector_match", "strong", "weak"]

# all-MiniLM-L6-v2 (the default model) cosines: see bench/relevance.py for the measurement
COSINE_STRONG = 0.40
TERMS_STRONG = 2
SHARE_STRONG = 0.5


def bm25_match(tokens: Sequence[str], held: Sequence[bool], score: float) -> dict | None:
    """The BM25 part of a hit's ``match``: which of the query's ``tokens`` it holds (``held``: a
    bool per token) and its BM25 ``score``; None when it holds none."""
    terms = [t for t, h in zip(tokens, held) if h]
    if not terms:
        return None
    return {"terms": terms, "matched": len(terms), "of": len(tokens), "score": round(float(score), 4)}


def vector_match(cosine: float | None) -> dict | None:
    """The vector part of a hit's ``match`` (None when the vector retriever did not run)."""
    return None if cosine is None else {"cosine": round(float(cosine), 4)}


def strong(match: dict | None) -> bool:
    """Whether one hit's ``match`` passes the threshold (see the module docstring)."""
    if not match:
        return False
    vector = match.get("vector")
    if vector is not None and vector["cosine"] >= COSINE_STRONG:
        return True
    bm25 = match.get("bm25")
    return bm25 is not None and bm25["matched"] >= min(TERMS_STRONG, bm25["of"]) \
        and bm25["matched"] >= SHARE_STRONG * bm25["of"]


def weak(matches: Iterable[dict | None]) -> bool:
    """True when no hit is :func:`strong` (and when there is none)."""
    return not any(strong(m) for m in matches)
