"""LLM sectioning in the dsRAG manner: numbered lines in, ``{title, start_line}`` sections out.

The document becomes numbered lines (blank lines dropped, long lines split), cut into
non-overlapping windows of about ``llm_window_chars`` characters. Every window is one request;
the windows of a whole batch of files go to the endpoint concurrently. Each answer is
validated and repaired (:func:`repair_window`), then the windows of a document are joined
(:func:`assemble`): a window whose text opens mid-section continues the previous window's last
section, and a window whose request failed is sectioned by local rules instead. Section starts
map back to character offsets in the parsed text, and ends derive from the next start, so the
sections tile the text with no gap or overlap, whatever the model said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from quarry.core.models import ParsedDocument, Section
from quarry.ingest.llm.client import Job, LLMFailure
from quarry.ingest.llm.prompts import SECTIONS_SCHEMA, SECTIONS_SYSTEM, SECTIONS_USER
from quarry.ingest.sectioning import SECTIONERS, Sectioner, extractive_title

MAX_LINE = 250  # characters per numbered line; longer lines are split at a space
ANSWER_TOKENS_PER_LINE = 8  # output budget: room for a section every ~3 lines, far beyond a sane answer
MAX_TITLE = 120
TINY_SECTION = 300  # characters; a window of mostly tinier sections is collapsed
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Line:
    """A numbered line: ``text[start:end]`` of the parsed document (never blank)."""

    start: int
    end: int


@dataclass(frozen=True)
class Window:
    """Lines ``[lo, hi)`` of a document, asked about in one request."""

    index: int
    lo: int
    hi: int


@dataclass(frozen=True)
class Proposed:
    """A section start the model proposed, after repair (line numbers are global)."""

    title: str
    line: int


@dataclass
class WindowSections:
    """A repaired window: its sections, and whether its first lines continue the previous section."""

    sections: list[Proposed]
    continues: bool = False
    repairs: tuple[str, ...] = ()


def numbered_lines(text: str, max_line: int = MAX_LINE) -> list[Line]:
    """The non-blank lines of ``text`` with their offsets; lines over ``max_line`` are split."""
    out: list[Line] = []
    pos = 0
    for raw in text.splitlines(keepends=True):
        start, end = pos, pos + len(raw.rstrip("\r\n"))
        pos += len(raw)
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        while end - start > max_line:
            cut = text.rfind(" ", start + max_line // 2, start + max_line)
            cut = cut if cut > start else start + max_line
            out.append(Line(start, cut))
            start = cut
            while start < end and text[start].isspace():
                start += 1
        if end > start:
            out.append(Line(start, end))
    return out


def windows(lines: list[Line], budget: int) -> list[Window]:
    """Consecutive, non-overlapping windows of at most ``budget`` characters (one line at least)."""
    out: list[Window] = []
    lo, used = 0, 0
    for i, line in enumerate(lines):
        size = line.end - line.start + 8  # the "[1234] " prefix and the newline
        if i > lo and used + size > budget:
            out.append(Window(len(out), lo, i))
            lo, used = i, 0
        used += size
    if lo < len(lines):
        out.append(Window(len(out), lo, len(lines)))
    return out


def window_job(text: str, lines: list[Line], window: Window) -> Job:
    """The request for one window."""
    numbered = "\n".join(f"[{n}] {text[lines[n].start : lines[n].end]}" for n in range(window.lo, window.hi))
    user = SECTIONS_USER.format(first=window.lo, last=window.hi - 1, lines=numbered)
    # A bounded answer: a model that loops (small models do) stops at the budget, and the
    # complete sections before the cut are kept (``parse_json`` closes a truncated answer).
    budget = min(4096, 100 + ANSWER_TOKENS_PER_LINE * (window.hi - window.lo))
    return Job(
        "sections",
        [{"role": "system", "content": SECTIONS_SYSTEM}, {"role": "user", "content": user}],
        schema=SECTIONS_SCHEMA,
        schema_name="sections",
        max_tokens=budget,
    )


def _as_int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("[").rstrip("]").isdigit():
        return int(value.strip().lstrip("[").rstrip("]"))
    return None


def _clean_title(value) -> str:
    """The model's title, tidied; "" (an extractive title is used instead) when it says nothing."""
    title = _SPACES.sub(" ", value if isinstance(value, str) else "").strip().strip("#*_`\"' ").strip()
    if not any(ch.isalnum() for ch in title):
        return ""  # "...", "-", "": small models answer with placeholders
    if len(title) > MAX_TITLE:
        cut = title.rfind(" ", MAX_TITLE // 2, MAX_TITLE)
        title = title[: cut if cut > 0 else MAX_TITLE].rstrip(" ,;:-")
    return title


def _norm(title: str) -> str:
    return _SPACES.sub(" ", title).strip().casefold()


def repair_window(answer: object, window: Window, lines: list[Line]) -> WindowSections | None:
    """Turn a model's answer for ``window`` into usable section starts, or None when nothing is usable.

    Repairs, in order: items that are not ``{title, start_line}`` are dropped; a window numbered
    from 0 instead of its first line is shifted; starts outside the window are dropped; the rest
    are sorted, a start given twice is kept once, and a section with the same title as the one
    before it is folded into it. A first start after the window's first line means the window
    opens inside a section: the first window's first section is moved up to line 0, later
    windows are marked as continuing the previous one. Absurdly many tiny sections are collapsed.
    """
    items = answer.get("sections") if isinstance(answer, dict) else answer
    if not isinstance(items, list):
        return None
    repairs: list[str] = []
    found: list[Proposed] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        line = _as_int(item.get("start_line", item.get("start")))
        if line is None:
            continue
        found.append(Proposed(_clean_title(item.get("title")), line))
    if len(found) < len(items):
        repairs.append("invalid items")
    if (
        found
        and window.lo > 0
        and not any(window.lo <= p.line < window.hi for p in found)
        and all(0 <= p.line < window.hi - window.lo for p in found)
    ):
        found = [Proposed(p.title, p.line + window.lo) for p in found]
        repairs.append("relative line numbers")
    kept = [p for p in found if window.lo <= p.line < window.hi]
    if len(kept) < len(found):
        repairs.append("out of range")
    kept.sort(key=lambda p: p.line)
    unique: list[Proposed] = []
    for p in kept:
        if unique and unique[-1].line == p.line:
            if not unique[-1].title and p.title:
                unique[-1] = p
            repairs.append("duplicate start")
            continue
        if unique and p.title and _norm(p.title) == _norm(unique[-1].title):
            repairs.append("repeated title")
            continue
        unique.append(p)
    if not unique:
        return None
    continues = False
    if unique[0].line > window.lo:
        if window.lo == 0:
            unique[0] = Proposed(unique[0].title, 0)
        else:
            continues = True
    unique = _collapse(unique, window, lines, repairs)
    return WindowSections(unique, continues, tuple(dict.fromkeys(repairs)))


def _collapse(sections: list[Proposed], window: Window, lines: list[Line], repairs: list[str]) -> list[Proposed]:
    """Merge tiny sections into their neighbours when a window has absurdly many of them."""

    def size(i: int, items: list[Proposed]) -> int:
        end = lines[items[i + 1].line].start if i + 1 < len(items) else lines[window.hi - 1].end
        return end - lines[items[i].line].start

    n_lines = window.hi - window.lo
    tiny = sum(1 for i in range(len(sections)) if size(i, sections) < TINY_SECTION)
    if len(sections) <= max(3, n_lines // 4) and tiny <= max(2, len(sections) // 2):
        return sections
    repairs.append("collapsed tiny sections")
    out: list[Proposed] = []
    for p in sections:
        if out and size(len(out) - 1, [*out, p]) < TINY_SECTION:
            continue  # the previous section is still tiny: this one joins it
        out.append(p)
    if len(out) > 1 and size(len(out) - 1, out) < TINY_SECTION:
        out.pop()  # a tiny tail joins the section before it
    return out


def assemble(
    doc: ParsedDocument, lines: list[Line], parts: list[tuple[Window, WindowSections | None]], local: list[Section]
) -> list[Section]:
    """Join the windows of one document into sections tiling ``doc.text``.

    ``parts`` pairs each window with its repaired answer, or None where the request failed or
    gave nothing usable; those windows take the section starts of ``local`` (the structure
    sectioner's output) that fall inside them. ``local`` also gives each section its heading
    breadcrumb, so that LLM titles sit under the document's own structure.
    """
    text = doc.text
    n = len(text)
    bounds: list[tuple[int, str]] = []  # (start offset, title)

    def add(start: int, title: str) -> None:
        if bounds and (start <= bounds[-1][0] or (title and _norm(title) == _norm(bounds[-1][1]))):
            return  # inside the previous section, or the same section continuing across a window
        bounds.append((start, title))

    for window, answer in parts:
        lo = 0 if window.lo == 0 else lines[window.lo].start
        hi = n if window.hi >= len(lines) else lines[window.hi].start
        if answer is None:
            covering = _covering(local, lo)
            if not bounds or (covering is not None and covering.start >= lo):
                add(lo, covering.title if covering else "")
            for s in local:
                if lo < s.start < hi:
                    add(s.start, s.title)
            continue
        # A window that "continues" gets no boundary at its first line: the lines before its
        # first start belong to the previous window's last section.
        for p in answer.sections:
            add(0 if p.line == 0 else lines[p.line].start, p.title)
    if not bounds:
        return []
    bounds[0] = (0, bounds[0][1])
    sections = []
    for i, (start, title) in enumerate(bounds):
        end = bounds[i + 1][0] if i + 1 < len(bounds) else n
        title = title or extractive_title(text[start:end])
        parent = _covering(local, start)
        if parent is not None and parent.path and _norm(parent.title) != _norm(title):
            path, level = f"{parent.path} > {title}", parent.level + 1
        elif parent is not None and parent.path:
            path, level = parent.path, parent.level
        else:
            path, level = title, 1
        sections.append(Section(index=i, title=title, level=level, start=start, end=end, path=path))
    return sections


def _covering(sections: list[Section], offset: int) -> Section | None:
    for s in sections:
        if s.start <= offset < s.end:
            return s
    return sections[-1] if sections and offset >= sections[-1].end else None


def section_batch(
    docs: list[tuple[str, ParsedDocument]], local: list[list[Section]], runtime, window_chars: int
) -> list[list[Section]]:
    """LLM sections of every document of a batch, all windows asked concurrently.

    ``docs`` are ``(path, document)`` pairs and ``local`` their structure sections (fallback
    and breadcrumbs). Windows that fail are recorded with ``runtime.note_fallback``.
    """
    plans = []
    jobs: list[Job] = []
    for _path, doc in docs:
        lines = numbered_lines(doc.text)
        wins = windows(lines, window_chars)
        plans.append((lines, wins, len(jobs)))
        jobs.extend(window_job(doc.text, lines, w) for w in wins)
    answers = runtime.run(jobs)
    out = []
    for (path, doc), (lines, wins, first), sections in zip(docs, plans, local):
        parts = []
        for w in wins:
            answer = answers[first + w.index]
            repaired = None if isinstance(answer, LLMFailure) else repair_window(answer, w, lines)
            if repaired is None:
                error = answer.error if isinstance(answer, LLMFailure) else "no usable sections in the answer"
                runtime.note_fallback(path, "sections", w.index, error)
            parts.append((w, repaired))
        out.append(assemble(doc, lines, parts, sections) if lines else sections)
    return out


@SECTIONERS.register("llm")
def _llm(**kw) -> Sectioner:
    """``--sectioner llm``: each document starts from the structure sectioner's sections, which
    :func:`section_batch` then replaces, a batch at a time, where the run's LLM answered."""
    return SECTIONERS.get("structure")(**kw)
