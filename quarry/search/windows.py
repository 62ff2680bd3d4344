"""Context windows: each hit with its neighbouring chunks, merged where hits meet.

``expand(index, results, before=1, after=1)`` widens every hit to the chunks
``[chunk_index - before, chunk_index + after]`` of its own document (clipped to the document's
true chunk count, ``documents.n_chunks``), then merges the ranges of one document that overlap
or touch, as RAGTools' ``chunks_window_margin`` does. A window's text is rebuilt from the
chunks' character offsets, so overlapping chunks (``chunk_overlap > 0``) never repeat text.
Windows come best first: ordered by the best (lowest) rank of the hits inside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from quarry.core.errors import UsageError
from quarry.core.sqlfiles import load_sql

GAP = "\n\n"  # stands for text between two chunks that no chunk covers (trimmed whitespace)


@dataclass
class ChunkRun:
    """A run of consecutive chunks of one document: what a window and a segment both are.

    ``first_chunk``/``last_chunk`` are inclusive chunk indexes; ``start_char``/``end_char`` the
    span of the document text it covers.
    """

    rank: int
    doc_id: str
    path: str
    title: str
    section: str
    header: str
    first_chunk: int
    last_chunk: int
    start_char: int
    end_char: int
    page_start: int | None
    page_end: int | None
    text: str


@dataclass
class Window(ChunkRun):
    """A run of consecutive chunks of one document around one or more hits.

    ``first_chunk``/``last_chunk`` are inclusive chunk indexes; ``start_char``/``end_char``
    the span of the document text the window covers; ``hits`` the ranks of the search results
    inside it (best first) and ``score`` the best of their scores.
    """

    hits: list[int]
    score: float
    chunk_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ChunkSpan:
    """The few columns of a chunk that rebuilding text needs."""

    chunk_index: int
    start_char: int
    end_char: int
    text: str


def parse_window(spec: str) -> tuple[int, int]:
    """``"B,A"`` (or a single ``"N"`` for both sides) as ``(before, after)``."""
    parts = [p.strip() for p in str(spec).split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) < 0:
        raise UsageError(f"--window takes BEFORE,AFTER as two non-negative integers (e.g. 1,1), got {spec!r}")
    return values[0], values[1]


def merge_text(chunks: Iterable[ChunkSpan]) -> str:
    """The text of consecutive chunks of one document, each character once.

    A chunk that starts before the previous one ends (overlap) contributes only what lies
    past that end; a gap between chunks (whitespace that chunking trimmed) becomes a blank line.
    """
    parts: list[str] = []
    end = None
    for c in chunks:
        if end is None:
            parts.append(c.text)
            end = c.end_char
        elif c.start_char >= end:
            parts.append(GAP if c.start_char > end else "")
            parts.append(c.text)
            end = c.end_char
        elif c.end_char > end:
            parts.append(c.text[end - c.start_char :])
            end = c.end_char
    return "".join(parts)


def merge_ranges(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge inclusive ``(first, last)`` ranges that overlap or touch (``last + 1 == first``)."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def id_lines(values: Iterable[str]) -> str:
    """Ids as one newline-separated SQL parameter (see sql/chunk_positions.sql for why)."""
    values = list(values)
    if any("\n" in v for v in values):
        raise ValueError("an id holds a newline")
    return "\n".join(values)


def chunk_positions(con, chunk_ids: Sequence[str]) -> dict[str, dict]:
    """``chunk_id -> {doc_id, chunk_index, n_chunks, path, title}`` from the catalog."""
    if not chunk_ids:
        return {}
    cur = con.execute(load_sql("chunk_positions"), [id_lines(chunk_ids)])
    cols = [d[0] for d in cur.description]
    return {row[0]: dict(zip(cols, row)) for row in cur.fetchall()}


def locate(con, results: Sequence) -> dict[str, dict]:
    """Like :func:`chunk_positions` for search results, reading the catalog as little as possible.

    A result that carries its ``doc_id`` and ``chunk_index`` (``chunk_id`` is
    ``<doc_id>:<chunk_index>``) needs only its document's size, a lookup in the small documents
    table; others are looked up by chunk id. Chunks gone from the catalog are left out.
    """
    known: dict[str, tuple[str, int]] = {}
    unknown: list[str] = []
    for r in results:
        ci = getattr(r, "chunk_index", None)
        if isinstance(ci, int) and r.chunk_id == f"{r.doc_id}:{ci}":
            known[r.chunk_id] = (r.doc_id, ci)
        else:
            unknown.append(r.chunk_id)
    out = chunk_positions(con, unknown)
    if known:
        docs = sorted({d for d, _ in known.values()})
        cur = con.execute(load_sql("document_sizes"), [id_lines(docs)])
        sizes = {row[0]: row for row in cur.fetchall()}
        for cid, (doc_id, ci) in known.items():
            if doc_id in sizes:
                _, n, path, title = sizes[doc_id]
                out[cid] = {
                    "chunk_id": cid,
                    "doc_id": doc_id,
                    "chunk_index": ci,
                    "n_chunks": n,
                    "path": path,
                    "title": title,
                }
    return out


def fetch_ranges(con, ranges: Sequence[tuple[str, int, int]]) -> dict[str, list[dict]]:
    """Rows of every chunk in the inclusive ``(doc_id, first, last)`` ranges, per document, in order."""
    if not ranges:
        return {}
    cur = con.execute(load_sql("window_chunks"), [id_lines(f"{d} {int(lo)} {int(hi)}" for d, lo, hi in ranges)])
    cols = [d[0] for d in cur.description]
    out: dict[str, list[dict]] = {}
    for row in cur.fetchall():
        item = dict(zip(cols, row))
        out.setdefault(item["doc_id"], []).append(item)
    return out


class ChunkReader:
    """The catalog reads windows and segments need, on one committed generation.

    Get one from :meth:`quarry.search.query.Index.chunk_reader`; every call on it reads the
    generation that was current when it was made, so a commit meanwhile never mixes two.
    """

    def __init__(self, con):
        self._con = con

    def locate(self, results: Sequence) -> dict[str, dict]:
        """``chunk_id -> {doc_id, chunk_index, n_chunks, path, title}`` for search results (see :func:`locate`)."""
        return locate(self._con, results)

    def ranges(self, ranges: Sequence[tuple[str, int, int]]) -> dict[str, list[dict]]:
        """Chunk rows of inclusive ``(doc_id, first, last)`` ranges, per document (see :func:`fetch_ranges`)."""
        return fetch_ranges(self._con, ranges)


def build_span(rows: list[dict], lo: int, hi: int) -> dict:
    """Offsets, pages, text and ids of the chunks ``lo..hi`` found in ``rows`` (one document)."""
    inside = [r for r in rows if lo <= r["chunk_index"] <= hi]
    pages = [p for r in inside for p in (r["page_start"], r["page_end"]) if p is not None]
    return {
        "first_chunk": inside[0]["chunk_index"],
        "last_chunk": inside[-1]["chunk_index"],
        "start_char": min(r["start_char"] for r in inside),
        "end_char": max(r["end_char"] for r in inside),
        "page_start": min(pages) if pages else None,
        "page_end": max(pages) if pages else None,
        "text": merge_text(ChunkSpan(r["chunk_index"], r["start_char"], r["end_char"], r["text"]) for r in inside),
        "chunk_ids": [r["chunk_id"] for r in inside],
        "header": inside[0]["header"],
        "rows": inside,
    }


class Hit(Protocol):
    """What a window reads of a search result (:class:`quarry.search.results.SearchResult`)."""

    @property
    def rank(self) -> int: ...

    @property
    def score(self) -> float: ...

    @property
    def chunk_id(self) -> str: ...


def expand(index, results: Sequence[Hit], before: int = 1, after: int = 1) -> list:
    """Widen each search result to ``before`` chunks before and ``after`` after, merged per document.

    ``results`` are :class:`quarry.search.query.SearchResult` (anything with ``rank``, ``score`` and
    ``chunk_id``); ``index`` is an open :class:`quarry.search.query.Index` (anything with a
    ``chunk_reader()``). Returns :class:`Window` objects, best first. ``Index.search(...,
    window=(before, after))`` calls this for you.
    """
    if before < 0 or after < 0:
        raise UsageError(f"window sizes must be non-negative, got before={before}, after={after}")
    if not results:
        return []
    reader = index.chunk_reader()
    pos = reader.locate(results)
    # (doc_id) -> list of (first, last, hit)
    wanted: dict[str, list[tuple[int, int, Hit]]] = {}
    for r in results:
        p = pos.get(r.chunk_id)
        if p is None:
            continue  # gone from the catalog since the search; never show a half window
        ci, last = p["chunk_index"], max(p["n_chunks"] - 1, p["chunk_index"])
        wanted.setdefault(p["doc_id"], []).append((max(0, ci - before), min(last, ci + after), r))
    merged = {doc: merge_ranges([(lo, hi) for lo, hi, _ in items]) for doc, items in wanted.items()}
    rows = reader.ranges([(doc, lo, hi) for doc, spans in merged.items() for lo, hi in spans])

    windows: list[Window] = []
    for doc, spans in merged.items():
        for lo, hi in spans:
            hits = sorted((r for a, b, r in wanted[doc] if lo <= a and b <= hi), key=lambda r: r.rank)
            span = build_span(rows.get(doc, []), lo, hi) if rows.get(doc) else None
            if span is None or not hits:
                continue
            best = hits[0]
            info = pos[best.chunk_id]
            section = next((x["section"] for x in span["rows"] if x["chunk_id"] == best.chunk_id), "")
            windows.append(
                Window(
                    rank=0,
                    doc_id=doc,
                    path=info["path"],
                    title=info["title"],
                    section=section,
                    header=span["header"],
                    first_chunk=span["first_chunk"],
                    last_chunk=span["last_chunk"],
                    start_char=span["start_char"],
                    end_char=span["end_char"],
                    page_start=span["page_start"],
                    page_end=span["page_end"],
                    text=span["text"],
                    hits=[h.rank for h in hits],
                    score=max(float(h.score) for h in hits),
                    chunk_ids=span["chunk_ids"],
                )
            )
    windows.sort(key=lambda w: w.hits[0])
    for i, w in enumerate(windows, start=1):
        w.rank = i
    return windows
