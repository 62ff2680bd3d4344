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
embeddings; None when the vector retriever did not run (``bm25`` mode, which never embeds the
query, or a vector weight of 0): ``weak`` then rests on the words alone, so a long query in
``bm25`` mode is weak far more often (docs/benchmarks.md, "all words held alone").

A hit is *strong* when either retriever vouches for it on its own: its cosine reaches
:data:`COSINE_STRONG`, or it holds every word of the query (at least :data:`TERMS_STRONG` and a
share :data:`SHARE_STRONG` of them). An answer is ``weak`` when no hit is strong (and when it has
no hit).

The thresholds were chosen by ``python bench/relevance.py`` (docs/benchmarks.md, "Weak answers")
on SciFact's 809 train queries against noise asked of the same corpus (Cranfield's 225 queries,
and 300 strings of five random words from Cranfield's text): of the rules "cosine >= c, or at
least min(t, of) words held and a share s of them" (c 0.20-0.70, t 1-3 or off, s 0-1), the one
that calls the most noise weak while calling at most 2% of the real answers that hold a judged-
relevant document weak (a weak answer becomes "not found"). Held out: SciFact test calls 1.6% of
its real answers weak and 94.5% of the noise; Cranfield 0.5% and 99.5%. The words part adds
nothing there (with all-MiniLM-L6-v2 a chunk holding every query word is close in meaning too;
looser word rules let noise through, as other corpora share common words) but keeps a keyword
match strong under another embedding model, whose cosines have another scale: the cosine
threshold is the default model's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["COSINE_STRONG", "TERMS_STRONG", "SHARE_STRONG", "bm25_match", "vector_match", "strong", "weak"]

# chosen by bench/relevance.py on SciFact train (see the module docstring); all-MiniLM-L6-v2's cosines
COSINE_STRONG = 0.40
TERMS_STRONG = 1  # with SHARE_STRONG 1.0: every word of the query, however many
SHARE_STRONG = 1.0


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
    return (
        bm25 is not None
        and bm25["matched"] >= min(TERMS_STRONG, bm25["of"])
        and bm25["matched"] >= SHARE_STRONG * bm25["of"]
    )


def weak(matches: Iterable[dict | None]) -> bool:
    """True when no hit is :func:`strong` (and when there is none)."""
    return not any(strong(m) for m in matches)
