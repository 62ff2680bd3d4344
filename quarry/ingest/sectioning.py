"""Sectioning: cut a parsed document into titled, contiguous, non-overlapping sections.

Every :class:`Sectioner` returns sections that tile the document text exactly.

- ``structure``: headings (Markdown, HTML, DOCX styles, PDF outline), by size otherwise;
- ``semantic``: the same headings, and every span longer than ``max_section`` (a long text
  with no headings, or a long stretch under one heading) cut where the topic shifts: sentence
  groups are embedded with the index's own embedder, and a cut goes where the cosine distance
  between neighbouring groups is largest, above a percentile of the span's distances, never
  leaving a piece shorter than ``min_section``;
- ``llm``: see :mod:`quarry.ingest.llm.sections` (it needs a batch, so ``quarry.ingest.process`` runs it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import numpy as np

from quarry.core.models import ParsedDocument, Section
from quarry.core.registry import SECTIONERS

_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n\s*")
GROUP_CHARS = 250  # a sentence group: the unit the semantic sectioner embeds and cuts between
TITLE_WORDS = 8


class Sectioner(Protocol):
    """Turns a parsed document into sections that cover ``[0, len(text))`` without gaps."""

    name: str

    def sections(self, doc: ParsedDocument) -> list[Section]: ...


def _by_size(text: str, start: int, end: int, max_size: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` at paragraph breaks into spans of about ``max_size`` characters."""
    if end - start <= max_size:
        return [(start, end)]
    spans = []
    cut = start
    while end - cut > max_size:
        window = text[cut : cut + max_size]
        breaks = [m.end() for m in _PARAGRAPH.finditer(window)]
        # Prefer the last paragraph break in the second half of the window; else any newline;
        # else cut hard (one enormous line).
        good = [b for b in breaks if b >= max_size // 2]
        if good:
            step = good[-1]
        else:
            nl = window.rfind("\n", max_size // 2)
            step = nl + 1 if nl > 0 else max_size
        spans.append((cut, cut + step))
        cut += step
    spans.append((cut, end))
    return spans


class StructureSectioner:
    """Sections from headings (Markdown, HTML, DOCX styles, PDF outline); by size otherwise."""

    name = "structure"

    def __init__(self, max_section: int = 4000):
        self.max_section = max_section

    def sections(self, doc: ParsedDocument) -> list[Section]:
        text = doc.text
        n = len(text)
        if n == 0:
            return []
        headings = sorted((h for h in doc.headings if 0 <= h.offset < n), key=lambda h: h.offset)
        # (start, title, level) boundaries; text before the first heading is an untitled section.
        bounds: list[tuple[int, str, int]] = []
        if not headings or headings[0].offset > 0:
            bounds.append((0, "", 0))
        for h in headings:
            if bounds and bounds[-1][0] == h.offset:
                bounds[-1] = (h.offset, h.title, h.level)  # two headings at one offset: keep the later
            else:
                bounds.append((h.offset, h.title.strip(), h.level))
        spans = [(s, bounds[i + 1][0] if i + 1 < len(bounds) else n, t, lvl) for i, (s, t, lvl) in enumerate(bounds)]
        paths = _paths(spans)
        pieces = _merge_empty(text, [(*span, path) for span, path in zip(spans, paths)])
        if len(pieces) == 1 and not pieces[0][2]:
            # No structure at all: sections by size so that long plain text still gets units.
            pieces = [(s, e, "", 0, "") for s, e in _by_size(text, 0, n, self.max_section)]
        return [
            Section(index=i, title=t, level=lvl, start=s, end=e, path=path)
            for i, (s, e, t, lvl, path) in enumerate(pieces)
        ]


def _paths(spans: list[tuple[int, int, str, int]]) -> list[str]:
    """Each span's heading breadcrumb ("Parent > Child"), from heading levels."""
    stack: list[tuple[int, str]] = []
    out = []
    for _, _, title, level in spans:
        if title:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
        out.append(" > ".join(t for _, t in stack))
    return out


def _merge_empty(text: str, spans: list[tuple]) -> list[tuple]:
    """Fold sections with no body (a heading directly followed by another) into the next one.

    The next section keeps its own title and breadcrumb, which still names the parent.
    Whitespace-only preambles disappear the same way.
    """
    out: list[tuple] = []
    carry_start: int | None = None
    for i, (s, e, title, level, path) in enumerate(spans):
        body = text[s:e]
        if title:
            body = body.split("\n", 1)[1] if "\n" in body else ""
        start = carry_start if carry_start is not None else s
        if not body.strip() and i + 1 < len(spans):
            if carry_start is None:
                carry_start = s
            continue
        carry_start = None
        out.append((start, e, title, level, path))
    return out


def sentence_groups(text: str, start: int, end: int, size: int = GROUP_CHARS) -> list[tuple[int, int]]:
    """Spans tiling ``[start, end)``: whole sentences (or lines) packed to about ``size`` characters.

    A paragraph break always ends a group, so that a topic shift there can become a cut.
    """
    breaks = [
        (m.end(), m.group().count("\n") >= 2)
        for m in _SENTENCE_BREAK.finditer(text, start, end)
        if start < m.end() < end
    ]
    groups: list[tuple[int, int]] = []
    prev, open_group = start, False
    for cut, paragraph in [*breaks, (end, True)]:
        if open_group and groups[-1][1] - groups[-1][0] < size:
            groups[-1] = (groups[-1][0], cut)  # the group is still short: the sentence joins it
        else:
            groups.append((prev, cut))
        open_group = not paragraph
        prev = cut
    return groups


def extractive_title(text: str, words: int = TITLE_WORDS) -> str:
    """A title taken from a span's opening: a short first line as it is, else the first sentence's words."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if 0 < len(first) <= 60 and not first.endswith((".", ",", ";")):
        return first.strip(" #*-=:")
    sentence = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0].strip(" #*-=:.;")
    parts = sentence.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


def semantic_cuts(distances: np.ndarray, sizes: list[int], min_size: int, max_size: int, threshold: float) -> list[int]:
    """Group indices where a new piece starts (sorted, excluding 0).

    A piece is cut at its most distant neighbour boundary that leaves both sides at least
    ``min_size`` characters, when that distance is above ``threshold`` or the piece is longer
    than ``max_size``; pieces are cut again the same way.
    """
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    cuts: list[int] = []
    stack = [(0, len(sizes))]
    while stack:
        lo, hi = stack.pop()
        length = offsets[hi] - offsets[lo]
        best, best_d = None, -1.0
        for b in range(lo + 1, hi):  # boundary b: between group b-1 and group b
            if (
                offsets[b] - offsets[lo] >= min_size
                and offsets[hi] - offsets[b] >= min_size
                and distances[b - 1] > best_d
            ):
                best, best_d = b, float(distances[b - 1])
        if best is None or (length <= max_size and best_d <= threshold):
            continue
        cuts.append(best)
        stack += [(lo, best), (best, hi)]
    return sorted(cuts)


class SemanticSectioner:
    """Headings first; long spans cut where neighbouring sentence groups' embeddings diverge."""

    name = "semantic"

    def __init__(
        self,
        embed: Callable[[list[str]], np.ndarray],
        max_section: int = 4000,
        min_section: int = 400,
        percentile: int = 90,
        batch: int = 64,
    ):
        self.embed = embed
        self.max_section = max_section
        self.min_section = min_section
        self.percentile = percentile
        self.batch = batch
        self._structure = StructureSectioner(max_section=1 << 62)  # headings only, never by size

    def sections(self, doc: ParsedDocument) -> list[Section]:
        out: list[Section] = []
        for section in self._structure.sections(doc):
            if section.end - section.start <= self.max_section:
                out.append(section)
                continue
            pieces = self.split(doc.text, section.start, section.end)
            for k, (a, b) in enumerate(pieces):
                if k == 0 and section.title:
                    out.append(replace(section, start=a, end=b))
                    continue
                title = extractive_title(doc.text[a:b])
                path = f"{section.path} > {title}" if section.path else title
                out.append(
                    Section(
                        index=0, title=title, level=section.level + 1 if section.title else 1, start=a, end=b, path=path
                    )
                )
        return [replace(s, index=i) for i, s in enumerate(out)]

    def split(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """Spans tiling ``[start, end)`` at topic shifts."""
        groups = sentence_groups(text, start, end)
        if len(groups) < 3:
            return _by_size(text, start, end, self.max_section)
        texts = [text[a:b] for a, b in groups]
        vectors = np.concatenate(
            [
                np.asarray(self.embed(texts[i : i + self.batch]), dtype=np.float32)
                for i in range(0, len(texts), self.batch)
            ]
        )
        distances = boundary_distances(vectors)
        threshold = float(np.percentile(distances, self.percentile))
        cuts = semantic_cuts(distances, [b - a for a, b in groups], self.min_section, self.max_section, threshold)
        bounds = [groups[0][0], *(groups[c][0] for c in cuts), end]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def boundary_distances(vectors: np.ndarray, window: int = 2) -> np.ndarray:
    """Cosine distance across each boundary between the ``window`` groups before and after it."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1.0, norms)
    out = np.empty(len(unit) - 1, dtype=np.float32)
    for b in range(1, len(unit)):
        left = unit[max(0, b - window) : b].mean(axis=0)
        right = unit[b : b + window].mean(axis=0)
        denom = float(np.linalg.norm(left) * np.linalg.norm(right)) or 1.0
        out[b - 1] = 1.0 - float(left @ right) / denom
    return out


# name -> factory(*, max_section, embed, min_section, percentile) -> Sectioner. Each sectioner
# registers itself where it is written (quarry/core/registry.py: SECTIONERS; plugins by entry point).


@SECTIONERS.register("structure")
def _structure(*, max_section: int = 4000, **_) -> Sectioner:
    return StructureSectioner(max_section=max_section)


@SECTIONERS.register("semantic")
def _semantic(
    *,
    max_section: int = 4000,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    min_section: int = 400,
    percentile: int = 90,
    **_,
) -> Sectioner:
    if embed is None:
        raise ValueError("the semantic sectioner needs an embedding function")
    return SemanticSectioner(embed, max_section=max_section, min_section=min_section, percentile=percentile)


def get_sectioner(
    name: str,
    max_section: int = 4000,
    *,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    min_section: int = 400,
    percentile: int = 90,
) -> Sectioner:
    """The sectioner registered as ``name`` (``semantic`` needs ``embed``; ``llm`` gives the local
    sectioner its batches start from)."""
    return SECTIONERS.get(name)(max_section=max_section, embed=embed, min_section=min_section, percentile=percentile)
