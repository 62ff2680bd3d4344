"""The evidence of an answer: passages retrieved as the asker may read, budgeted by tokens.

:func:`gather` runs the same search ``quarry search --segments`` runs (hybrid retrieval, the
caller's principals inside both retrievers, relevant segment extraction), then turns the segments
(and any top hit no segment holds) into numbered :class:`Passage` s: identical texts once, best
first, until ``max_tokens`` is spent. :func:`shares_content_word` says whether any passage holds a
word of the question as BM25 reads it (stop words and question words dropped, Porter stems), the
second of the two signals that make an answer ``not_found`` without a model call.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field

from quarry.search.highlight import query_terms, term_spans

__all__ = [
    "Passage",
    "gather",
    "content_terms",
    "content_words",
    "shares_content_word",
    "estimate_tokens",
    "QUESTION_WORDS",
]

CHARS_PER_TOKEN = 4  # about four characters a token for English text (OpenAI's rule of thumb)
# Words that ask rather than name a subject: a passage holding only these is not about the question.
QUESTION_WORDS = frozenset(
    """
answer answers ask asked describe described describes detail details document documents explain explained
explains find give index list mention mentioned mentions passage passages question say says show summarise
summarize tell text
""".split()
)


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` for budgeting (no tokenizer of the remote model is at hand)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


@dataclass
class Passage:
    """One numbered piece of evidence: a relevant segment (or a single hit) of one document."""

    number: int
    doc_id: str
    path: str
    title: str
    section: str
    page_start: int | None
    page_end: int | None
    first_chunk: int
    last_chunk: int
    chunk_ids: list[str]
    text: str
    score: float = 0.0
    tokens: int = 0
    truncated: bool = False
    chunk_offsets: list[int] = field(default_factory=list)  # where each chunk starts in ``text``

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("chunk_offsets")
        return out

    def chunk_at(self, offset: int) -> str:
        """The id of the chunk holding character ``offset`` of the passage's text."""
        at = 0
        for i, start in enumerate(self.chunk_offsets):
            if start <= offset:
                at = i
        return self.chunk_ids[min(at, len(self.chunk_ids) - 1)] if self.chunk_ids else ""


def _key(text: str) -> str:
    return hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()


def _from_segment(seg) -> dict:
    return {
        "doc_id": seg.doc_id,
        "path": seg.path,
        "title": seg.title,
        "section": seg.section,
        "page_start": seg.page_start,
        "page_end": seg.page_end,
        "first_chunk": seg.first_chunk,
        "last_chunk": seg.last_chunk,
        "chunk_ids": list(seg.chunk_ids),
        "text": seg.text,
        "score": float(seg.score),
    }


def _from_hit(hit) -> dict:
    return {
        "doc_id": hit.doc_id,
        "path": hit.path,
        "title": hit.title,
        "section": hit.section,
        "page_start": hit.page_start,
        "page_end": hit.page_end,
        "first_chunk": hit.chunk_index,
        "last_chunk": hit.chunk_index,
        "chunk_ids": [hit.chunk_id],
        "text": hit.text,
        "score": float(hit.score),
    }


def pack(candidates: list[dict], max_tokens: int) -> list[Passage]:
    """Numbered passages from ``candidates`` (best first): identical texts and chunks already given
    once, until ``max_tokens`` is spent. The first passage is cut to fit rather than dropped."""
    out: list[Passage] = []
    seen_text: set[str] = set()
    seen_chunks: set[str] = set()
    spent = 0
    for cand in candidates:
        text = cand["text"].strip()
        if not text:
            continue
        key = _key(text)
        chunks = [c for c in cand["chunk_ids"] if c not in seen_chunks]
        if key in seen_text or not chunks:
            continue
        tokens = estimate_tokens(text)
        truncated = False
        if spent + tokens > max_tokens:
            if out:
                continue  # a later, shorter passage may still fit
            text = text[: max(1, (max_tokens - spent) * CHARS_PER_TOKEN)]
            tokens, truncated = estimate_tokens(text), True
        seen_text.add(key)
        seen_chunks.update(cand["chunk_ids"])
        spent += tokens
        out.append(Passage(number=len(out) + 1, tokens=tokens, truncated=truncated, **{**cand, "text": text}))
    return out


def gather(
    index,
    question: str,
    *,
    k: int = 8,
    mode: str = "hybrid",
    filters=None,
    principals=None,
    max_tokens: int = 3000,
    segments: str = "balanced",
):
    """``(response, passages)``: the search of ``question`` as ``principals`` (relevant segments
    over the pool, the top ``k`` hits) and the evidence cut from it within ``max_tokens``."""
    response = index.search(question, k=k, mode=mode, filters=filters, principals=principals, segments=segments)
    segs = response.segments or []
    candidates = [_from_segment(s) for s in segs]
    covered = {c for s in segs for c in s.chunk_ids}
    candidates += [_from_hit(h) for h in response.results if h.chunk_id not in covered]
    passages = pack(candidates, max_tokens)
    offsets = _chunk_offsets(index, passages)
    for p in passages:
        p.chunk_offsets = offsets.get(p.number, [0])
    return response, passages


def _chunk_offsets(index, passages: list[Passage]) -> dict[int, list[int]]:
    """Where each chunk of a multi-chunk passage starts in its text (a segment's text is its chunks'
    document span, so the offsets are the chunks' start_char less the passage's)."""
    out: dict[int, list[int]] = {}
    multi = [p for p in passages if len(p.chunk_ids) > 1]
    if not multi:
        return out
    reader = index.chunk_reader()
    rows = reader.ranges([(p.doc_id, p.first_chunk, p.last_chunk) for p in multi])
    for p in multi:
        got = rows.get(p.doc_id) or []
        inside = [r for r in got if p.first_chunk <= r["chunk_index"] <= p.last_chunk]
        if len(inside) == len(p.chunk_ids):
            base = inside[0]["start_char"]
            out[p.number] = [max(0, r["start_char"] - base) for r in inside]
    return out


def content_terms(question: str) -> frozenset[str]:
    """The question's BM25 terms (and stems) that name a subject: stop words and question words out."""
    drop = QUESTION_WORDS | frozenset(query_terms(" ".join(QUESTION_WORDS)))
    return frozenset(t for t in query_terms(question) if t not in drop)


def content_words(question: str) -> list[str]:
    """The question's content words as BM25 tokens (unstemmed), for saying what was searched."""
    from quarry.retrieval.bm25 import query_tokens

    return [w for w in query_tokens(question) if w not in QUESTION_WORDS]


def shares_content_word(question: str, passages: list[Passage]) -> bool:
    """Whether any passage holds a content word of ``question`` (as BM25 reads both)."""
    terms = content_terms(question)
    if not terms:
        return False
    return any(term_spans(p.text, terms) for p in passages)
