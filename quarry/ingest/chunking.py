"""Chunking: recursive splitting of each section to a size, with exact character offsets.

Splitting tries paragraph breaks first, then line breaks, sentence ends and spaces, and cuts
hard only inside a single enormous word. Neighbouring pieces are then packed greedily up to
the size, and a too-short tail is merged into the chunk before it. Finally every chunk's
embedded text (header + text) is measured with the model's tokenizer and re-split until it
fits the model's input, so nothing is silently truncated.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from quarry.core.models import Chunk, ParsedDocument, Section, join_header, text_hash

SEPARATORS = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraphs
    re.compile(r"\n"),  # lines
    re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+"),  # sentences
    re.compile(r"\s+"),  # words
)
MAX_REFITS = 4


def _atoms(text: str, start: int, end: int, size: int, level: int = 0) -> list[tuple[int, int]]:
    """Contiguous spans tiling ``[start, end)``, each at most ``size`` characters."""
    if end - start <= size:
        return [(start, end)]
    if level >= len(SEPARATORS):
        return [(i, min(i + size, end)) for i in range(start, end, size)]
    cuts = [m.end() for m in SEPARATORS[level].finditer(text, start, end) if start < m.end() < end]
    if not cuts:
        return _atoms(text, start, end, size, level + 1)
    out: list[tuple[int, int]] = []
    prev = start
    for cut in [*cuts, end]:
        if cut - prev > size:
            out.extend(_atoms(text, prev, cut, size, level + 1))
        elif cut > prev:
            out.append((prev, cut))
        prev = cut
    return out


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def split_spans(text: str, start: int, end: int, size: int, min_chunk: int = 0) -> list[tuple[int, int]]:
    """Chunk spans of ``text[start:end]``: at most ``size`` characters, whitespace-trimmed."""
    merged: list[tuple[int, int]] = []
    cur_start: int | None = None
    cur_end = start
    for a, b in _atoms(text, start, end, size):
        if cur_start is None:
            cur_start, cur_end = a, b
        elif b - cur_start <= size:
            cur_end = b
        else:
            merged.append((cur_start, cur_end))
            cur_start, cur_end = a, b
    if cur_start is not None:
        merged.append((cur_start, cur_end))
    spans = [s for s in (_strip(text, a, b) for a, b in merged) if s[1] > s[0]]
    if len(spans) > 1 and spans[-1][1] - spans[-1][0] < min_chunk:
        # A short tail says little on its own: give it to its neighbour if that stays sane.
        prev, tail = spans[-2], spans[-1]
        if tail[1] - prev[0] <= size + min_chunk:
            spans[-2:] = [(prev[0], tail[1])]
    return spans


def _with_overlap(text: str, spans: list[tuple[int, int]], overlap: int) -> list[tuple[int, int]]:
    """Start each chunk ``overlap`` characters early, on a word boundary."""
    if overlap <= 0:
        return spans
    out = [spans[0]]
    for (prev_start, _), (start, end) in zip(spans, spans[1:]):
        s = max(prev_start, start - overlap)
        while s < start and not text[s - 1].isspace():
            s += 1
        out.append((s, end))
    return out


def chunk_document(
    doc_id: str,
    doc: ParsedDocument,
    sections: list[Section],
    headers: list[str],
    size: int = 800,
    overlap: int = 0,
    min_chunk: int = 200,
    count_tokens: Callable[[list[str]], list[int]] | None = None,
    max_tokens: int = 0,
    place: Callable[[Section, int, int], str] | None = None,
) -> list[Chunk]:
    """Cut each section into chunks; ``headers[i]`` is section ``i``'s contextual header.

    ``place(section, start, end)`` gives the header lines that depend on where a chunk sits (its
    page's title, its table: :func:`quarry.ingest.context.place_lines`); with it, a section is
    also cut where a table of ``doc.tables`` starts and ends, so that a chunk is all table or none.

    With ``count_tokens`` and ``max_tokens``, a chunk whose header + text exceeds the model's
    input is split again with a smaller size; one that still cannot fit (a header longer than
    the model's input) is kept and flagged ``truncated``.
    """
    text = doc.text
    planned: list[tuple[Section, str, int, int]] = []
    cuts = sorted({x for t in doc.tables for x in (t.start, t.end)}) if place else []
    for section, header in zip(sections, headers):
        inner = [x for x in cuts if section.start < x < section.end]
        bounds = [section.start, *inner, section.end]
        for lo, hi in zip(bounds, bounds[1:]):
            spans = _with_overlap(text, split_spans(text, lo, hi, size, min_chunk), overlap)
            planned.extend((section, header, a, b) for a, b in spans)

    def full(section: Section, header: str, a: int, b: int) -> str:
        extra = place(section, a, b) if place else ""
        return f"{header}\n{extra}" if header and extra else header or extra

    def embedded() -> list[str]:
        return [join_header(full(s, h, a, b), text[a:b]) for s, h, a, b in planned]

    flags = [False] * len(planned)
    counts = [0] * len(planned)
    texts: list[str] | None = None  # the embedded texts of ``planned``, once measured
    if count_tokens and max_tokens:
        for _ in range(MAX_REFITS):
            texts = embedded()
            counts = count_tokens(texts)
            over = [i for i, n in enumerate(counts) if n > max_tokens]
            if not over:
                break
            refit: list[tuple[Section, str, int, int]] = []
            for i, (section, header, a, b) in enumerate(planned):
                if counts[i] <= max_tokens:
                    refit.append((section, header, a, b))
                    continue
                smaller = max(50, int((b - a) * max_tokens / counts[i] * 0.9))
                pieces = split_spans(text, a, b, smaller) if smaller < b - a else [(a, b)]
                refit.extend((section, header, x, y) for x, y in pieces)
            planned = refit
        else:
            texts = embedded()
            counts = count_tokens(texts)
        flags = [n > max_tokens for n in counts]
    if texts is None:
        texts = embedded()

    chunks = []
    for index, (section, base, a, b) in enumerate(planned):
        body = text[a:b]
        header = full(section, base, a, b)
        chunks.append(
            Chunk(
                chunk_id=f"{doc_id}:{index}",
                doc_id=doc_id,
                section_index=section.index,
                chunk_index=index,
                start=a,
                end=b,
                page_start=doc.page_at(a),
                page_end=doc.page_at(max(a, b - 1)),
                header=header,
                text=body,
                text_hash=text_hash(texts[index]),
                n_tokens=counts[index],
                truncated=flags[index],
            )
        )
    return chunks
