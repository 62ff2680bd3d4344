"""Sectioning: cut a parsed document into titled, contiguous, non-overlapping sections.

The :class:`Sectioner` protocol is the seam that later sectioners (local-semantic, LLM) plug
into; every implementation returns sections that tile the document text exactly.
"""

from __future__ import annotations

import re
from typing import Protocol

from quarry.models import ParsedDocument, Section

_PARAGRAPH = re.compile(r"\n\s*\n")


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
        spans = _merge_empty(text, [(*span, path) for span, path in zip(spans, paths)])
        if len(spans) == 1 and not spans[0][2]:
            # No structure at all: sections by size so that long plain text still gets units.
            spans = [(s, e, "", 0, "") for s, e in _by_size(text, 0, n, self.max_section)]
        return [
            Section(index=i, title=t, level=lvl, start=s, end=e, path=path)
            for i, (s, e, t, lvl, path) in enumerate(spans)
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


def get_sectioner(name: str, max_section: int = 4000) -> Sectioner:
    """The sectioner called ``name``."""
    if name == "structure":
        return StructureSectioner(max_section=max_section)
    raise ValueError(f"unknown sectioner {name!r}")
