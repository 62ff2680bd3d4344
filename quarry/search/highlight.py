"""Where a query's terms occur in a text, by BM25's own reading of words.

A word of the text is a match when one of its BM25 tokens (:func:`quarry.retrieval.textnorm.tokens`:
case and accents folded, compounds split) or their Porter stems equals a token or stem of the
query (stop words dropped, :func:`quarry.retrieval.bm25.query_tokens`). So what is marked is what
BM25 scored: ``deploys`` and ``Deployment`` for "deploy", ``v1.4.4`` for "1.4.4", never ``the``.
"""

from __future__ import annotations

from functools import lru_cache

from quarry.retrieval.bm25 import query_tokens, stem_words
from quarry.retrieval.textnorm import WORD, tokens

__all__ = ["query_terms", "term_spans", "split_marked"]


@lru_cache(maxsize=256)
def query_terms(query: str) -> frozenset[str]:
    """The tokens of ``query`` BM25 searches for, with their stems."""
    words = query_tokens(query)
    return frozenset(words) | frozenset(stem_words(words))


def term_spans(text: str, query: str | frozenset[str]) -> list[tuple[int, int]]:
    """``[start, end)`` of each word of ``text`` that matches a term of ``query``, in order."""
    terms = query_terms(query) if isinstance(query, str) else query
    if not terms or not text:
        return []
    return [m.span() for m in WORD.finditer(text) if not terms.isdisjoint(_word_terms(m.group()))]


@lru_cache(maxsize=65_536)
def _word_terms(word: str) -> frozenset[str]:
    found = tokens(word)
    return frozenset(found) | frozenset(stem_words(found))


def split_marked(text: str, query: str | frozenset[str]) -> list[tuple[str, bool]]:
    """``text`` cut into ``(piece, matched)`` pieces, in order (the pieces join to ``text``)."""
    out, at = [], 0
    for start, end in term_spans(text, query):
        if start > at:
            out.append((text[at:start], False))
        out.append((text[start:end], True))
        at = end
    if at < len(text):
        out.append((text[at:], False))
    return out
