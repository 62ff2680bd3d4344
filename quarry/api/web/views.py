"""What the pages show, as plain data: a document's chunks laid out with page breaks, the runs
chart's bars, and the few formats the templates share. No I/O: the router reads the library and
hands the answers here, the templates only print what comes back."""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from quarry.core.models import STAGES
from quarry.search.highlight import query_terms, split_marked

CHUNKS_PER_PAGE = 40  # chunks of a document shown at once (a page stays well under 200 KB)
CHART_RUNS = 60  # runs in the stage chart


# --- formats ------------------------------------------------------------------------------------


def size(n: int | float | None) -> str:
    """Bytes as ``12.3 MB`` (powers of 1,000, as `ls -h --si` and file managers write them)."""
    if n is None:
        return "–"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def seconds(s: float | None) -> str:
    """A duration as ``840 ms``, ``12.4 s``, ``3 min 20 s`` or ``2 h 05 min``."""
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def when(iso: str | None, now: datetime | None = None) -> str:
    """``2026-03-01 14:02 UTC`` from an ISO time (``Z`` or naive: UTC)."""
    moment = parse_time(iso)
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "–"


def ago(iso: str | None, now: datetime | None = None) -> str:
    """``5 min ago``, ``3 h ago``, ``2 d ago`` from an ISO time."""
    moment = parse_time(iso)
    if moment is None:
        return ""
    now = now or datetime.now(UTC)
    s = max(0.0, (now - moment).total_seconds())
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= length:
            return f"{int(s // length)} {unit} ago"
    return "just now"


def parse_time(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        moment = datetime.fromisoformat(str(iso).removesuffix("Z"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def pages(start: int | None, end: int | None) -> str:
    """``p. 3`` or ``pp. 3–5``; empty for a document without pages."""
    if not start:
        return ""
    return f"p. {start}" if not end or end == start else f"pp. {start}–{end}"


def number(n) -> str:
    return "–" if n is None else f"{n:,}"


# --- the document view --------------------------------------------------------------------------


@dataclass
class Block:
    """One chunk as the document view draws it: its spans and pieces of text between page breaks."""

    chunk: dict
    hit: bool
    parts: list = field(default_factory=list)  # ("text", [(piece, marked)]) or ("page", number, ocr)
    overlap: int = 0  # characters shared with the chunk before (shown there, not again)


def document_window(n_chunks: int, at: int | None, start: int | None) -> tuple[int, int]:
    """The chunks ``[first, last]`` to show: the page of :data:`CHUNKS_PER_PAGE` holding chunk ``at``,
    or the one from ``start``."""
    if n_chunks <= 0:
        return 0, -1
    if start is None:
        start = ((at or 0) // CHUNKS_PER_PAGE) * CHUNKS_PER_PAGE
    start = max(0, min(int(start), n_chunks - 1))
    return start, min(n_chunks, start + CHUNKS_PER_PAGE) - 1


def layout(doc: dict, first: int, last: int, hit: int | None, query: str = "") -> list[Block]:
    """The chunks ``first..last`` of ``doc`` (``Index.document(..., text=(first, last))``) with the
    page breaks inside and between them and the query's terms marked.

    Page breaks come from ``page_offsets`` (where each page starts in the parsed text); a catalog
    written before they were kept gives each chunk's first page instead, drawn where it changes."""
    terms = query_terms(query) if query.strip() else frozenset()
    offsets = list(doc.get("page_offsets") or [])
    ocr = set(doc.get("ocr_page_numbers") or [])
    blocks: list[Block] = []
    prev_end, prev_page = None, None
    for chunk in doc["chunks"]:
        index = chunk["chunk_index"]
        if index < first or index > last or "text" not in chunk:
            continue
        block = Block(chunk=chunk, hit=index == hit)
        text, start = chunk["text"], chunk["start_char"]
        skip = 0
        if prev_end is not None and prev_end > start:  # an overlapping chunk: its head was shown before
            skip = min(len(text), prev_end - start)
            block.overlap = skip
        if offsets:
            shown = start + skip  # where this block's text starts in the parsed text
            if not blocks:  # the first block shown says which page it starts on
                page = max(1, bisect.bisect_right(offsets, shown))
                block.parts.append(("page", page, page in ocr))
                after = shown
            else:
                assert prev_end is not None  # set with the block before
                after = prev_end - 1  # pages starting in the gap since the last chunk break before this one
            at = skip
            for i in range(bisect.bisect_right(offsets, after), len(offsets)):
                if offsets[i] >= chunk["end_char"]:
                    break
                cut = max(offsets[i] - start, at)
                if cut > at:
                    block.parts.append(("text", _marked(text[at:cut], terms)))
                block.parts.append(("page", i + 1, i + 1 in ocr))
                at = cut
            if at < len(text):
                block.parts.append(("text", _marked(text[at:], terms)))
        else:
            page = chunk.get("page_start")
            if page and page != prev_page:
                block.parts.append(("page", page, page in ocr))
            block.parts.append(("text", _marked(text[skip:], terms)))
            prev_page = chunk.get("page_end") or page or prev_page
        prev_end = max(prev_end or 0, chunk["end_char"])
        blocks.append(block)
    return blocks


def _marked(text: str, terms: frozenset[str]) -> list[tuple[str, bool]]:
    return split_marked(text, terms) if terms else [(text, False)]


_HEADING = re.compile(r"(?m)^[ \t]{0,3}#{1,6}[ \t]+")


def snippet(text: str) -> str:
    """A chunk's text as a result shows it: Markdown's heading marks (``## ``) taken off its lines
    (the document view keeps the text as quarry cut it)."""
    return _HEADING.sub("", text or "")


def split_around(text: str, part: str) -> tuple[str, str, str]:
    """``text`` as (before, ``part``, after) at ``part``'s first place in it; the whole text as
    ``part`` when it is not there (a context window around a hit, the hit marked)."""
    at = text.find(part) if part else -1
    if at < 0:
        return "", text, ""
    return text[:at], part, text[at + len(part) :]


def outline(doc: dict) -> list[dict]:
    """The sections with the chunk each starts at (the outline links there)."""
    first_chunk: dict[int, int] = {}
    for chunk in doc["chunks"]:
        first_chunk.setdefault(chunk["section_index"], chunk["chunk_index"])
    out = []
    for section in doc["sections"]:
        out.append({**section, "chunk": first_chunk.get(section["section_index"])})
    return out


# --- the runs chart -----------------------------------------------------------------------------


@dataclass
class Bar:
    stage: str
    run_id: str
    x: float
    y: float
    width: float
    height: float
    seconds: float
    label: str


@dataclass
class Lane:
    stage: str
    top: float
    height: float
    peak: float  # the lane's scale: its longest bar, in seconds
    bars: list[Bar]


@dataclass
class Chart:
    width: float
    height: float
    left: float
    lanes: list[Lane]
    ticks: list[tuple[float, str]]  # (x, date) under the lanes
    runs: int


def stage_chart(runs: list[dict], width: float = 960, lane: float = 30, left: float = 150) -> Chart | None:
    """Each run's stage durations over time: one lane per stage (and the run's total), runs
    oldest to newest from left to right, one bar per stage a run went through. Each lane has its
    own scale (its longest bar fills it; the peak is printed), so a short stage's trend shows as
    clearly as the embedding's. ``runs`` newest first, as :meth:`quarry.Index.runs` gives them;
    runs that timed nothing (skipped, refused) are left out. None when no run has durations."""
    timed = [r for r in runs if any(isinstance((r.get("durations") or {}).get(s), dict) for s in STAGES)]
    timed = list(reversed(timed[:CHART_RUNS]))
    if not timed:
        return None
    stages = [s for s in STAGES if any(isinstance(r["durations"].get(s), dict) for r in timed)] + ["total"]
    slot = (width - left) / max(len(timed), 1)
    bar_width = max(2.0, min(slot * 0.7, 28.0))
    lanes = []
    for i, stage in enumerate(stages):
        top = 8 + i * lane
        values = [_stage_seconds(r["durations"], stage) for r in timed]
        peak = max((v for v in values if v is not None), default=0.0)
        bars = []
        for j, (run, value) in enumerate(zip(timed, values)):
            if value is None:
                continue
            height = (lane - 8) * (value / peak if peak > 0 else 0)
            height = max(height, 1.0)  # a zero-length stage still shows it ran
            x = left + j * slot + (slot - bar_width) / 2
            bars.append(
                Bar(
                    stage=stage,
                    run_id=run["run_id"],
                    x=round(x, 1),
                    y=round(top + lane - 6 - height, 1),
                    width=round(bar_width, 1),
                    height=round(height, 1),
                    seconds=value,
                    label=f"{stage} {seconds(value)}, {when(run.get('started'))}",
                )
            )
        lanes.append(Lane(stage=stage, top=top, height=lane, peak=peak, bars=bars))
    height = 8 + len(stages) * lane + 18
    step = max(1, math.ceil(len(timed) / 6))
    ticks = [
        (round(left + j * slot + slot / 2, 1), (parse_time(r.get("started")) or datetime.min).strftime("%m-%d %H:%M"))
        for j, r in enumerate(timed)
        if j % step == 0
    ]
    return Chart(width=width, height=height, left=left, lanes=lanes, ticks=ticks, runs=len(timed))


def _stage_seconds(durations: dict, stage: str) -> float | None:
    value = (durations or {}).get(stage)
    if isinstance(value, (int, float)):  # ``total`` of runs recorded before it carried rows
        return float(value)
    if isinstance(value, dict) and value.get("seconds") is not None:
        return float(value["seconds"])
    return None


def took(durations: dict | None) -> float | None:
    """A run's wall time from its ``durations`` (None when it timed nothing)."""
    return _stage_seconds(durations or {}, "total")


def stage_rows(durations: dict) -> list[dict]:
    """One run's stages in pipeline order with their share of the run's wall time (for its detail)."""
    total = took(durations)
    rows = []
    longest = (
        max((v.get("seconds") or 0 for k, v in durations.items() if isinstance(v, dict) and k != "total"), default=0)
        or 1
    )
    for stage in STAGES:
        value = durations.get(stage)
        if not isinstance(value, dict):
            continue
        s = float(value.get("seconds") or 0)
        rows.append(
            {
                "stage": stage,
                "seconds": s,
                "busy": value.get("busy_seconds"),
                "rows": value.get("rows"),
                "rate": value.get("rows_per_s"),
                "share": s / total if total else None,
                "width": round(100 * s / longest, 1),
            }
        )
    return rows
