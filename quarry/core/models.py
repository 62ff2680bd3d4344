"""Plain data exchanged between the pipeline stages.

Everything here is a small dataclass of plain values (strings, numbers, lists, dicts), so that a
batch travels between Prefect tasks, threads, processes and Dask or Ray workers with pickle or
cloudpickle and no custom serialiser (``tests/test_pipeline.py`` pickles every task's arguments
and results on a real run). :class:`RunReport` is the one definition of a run's counters.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "FileInfo",
    "Heading",
    "Table",
    "ParsedDocument",
    "Section",
    "Chunk",
    "DocumentRecord",
    "FileError",
    "join_header",
    "FUSION_WEIGHTS",
    "HEADER_FIELDS",
    "RETRIEVERS",
    "SEARCH_MODES",
]

# The lines a chunk header may hold, in the order they are written (quarry/ingest/context.py);
# ``page`` and ``table`` say where on its page a chunk sits (the page's title, the table it is cut from).
HEADER_FIELDS = ("title", "summary", "section", "section_summary", "chunk_context", "page", "table")
# The retrievers of a hybrid search, and the search modes: both fused, or one alone.
RETRIEVERS = ("vector", "bm25")
SEARCH_MODES = ("hybrid", *RETRIEVERS)
# What a search's ``weights`` may name: the retrievers, and the document evidence TMM adds
# (quarry/search/fusion.py, with_documents).
FUSION_WEIGHTS = (*RETRIEVERS, "documents")


@dataclass(frozen=True)
class FileInfo:
    """A file found by discovery, or a member of an archive.

    A member's ``path`` is ``<archive>!/<member>`` (nested: ``a.zip!/b.tar!/c.md``), ``archive`` the
    archive file on disk that holds it, ``size`` and ``mtime`` its own, and ``sha256`` its identity
    as the archive states it (``crc32:<hex>:<size>`` for ZIP and 7z; see parsers/archive.py).
    """

    path: str  # absolute, resolved path
    root: str  # the root it was found under (absolute)
    rel_path: str  # path relative to root, POSIX separators
    file_type: str  # a name from quarry.ingest.parsers.FORMATS ("md", "pdf", "pptx", ...), or "" when unsupported
    size: int
    mtime: float
    sha256: str
    archive: str = ""  # for a member of an archive: the archive's path on disk
    # discovery's quick check (quarry/ingest/discover.py): True when the catalog's size, mtime and
    # ctime vouched for its sha256 (the file was not read), False when the check was tried and the
    # file was read instead, None when it was not tried (a new store, --full, objects, members)
    vouched: bool | None = None

    @classmethod
    def found(
        cls,
        path: str,
        root: str,
        rel_path: str,
        file_type: str,
        size: int,
        mtime: float,
        sha256: str,
        vouched: bool | None,
    ) -> FileInfo:
        """A file on disk as discovery builds one per file of a tree: equal to ``FileInfo(...)``,
        made without the frozen ``__init__``'s ``object.__setattr__`` per field (3.7 to 0.8 us a
        file measured, in a walk of 50,000 files that costs 25 us a file in all)."""
        info = object.__new__(cls)
        info.__dict__.update(
            path=path,
            root=root,
            rel_path=rel_path,
            file_type=file_type,
            size=size,
            mtime=mtime,
            sha256=sha256,
            archive="",
            vouched=vouched,
        )
        return info


@dataclass(frozen=True)
class Heading:
    """A heading found by a parser: its level (1 = top), title and character offset in the text."""

    level: int
    title: str
    offset: int


@dataclass(frozen=True)
class Table:
    """A table a parser found at ``[start, end)`` of the text: its title and its column headers
    (``Years ended December 31: 2018 | 2017 | 2016``), either possibly empty."""

    start: int
    end: int
    title: str
    columns: str = ""


@dataclass
class ParsedDocument:
    """A document's text with the structure a parser could recover.

    ``page_offsets[i]`` is the character offset where page ``i + 1`` starts (PDF pages, PPTX
    slides, TIFF frames);
    ``headings`` are sorted by offset; ``page_titles[i]`` is page ``i + 1``'s running title (the
    statement or section name at its top, "" for none; empty when the parser reads no layout);
    ``tables`` are the tables found in the text, in order.
    """

    text: str
    title: str | None = None
    headings: list[Heading] = field(default_factory=list)
    page_offsets: list[int] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    # sha256 of the bytes this text came from (set by parsers.parse_file): a file rewritten
    # between discovery and parsing is stored with the hash of what was parsed.
    sha256: str | None = None
    ocr_pages: int = 0  # pages (or images) read by OCR
    ocr_seconds: float = 0.0
    ocr_page_numbers: list[int] = field(default_factory=list)  # 1-based pages whose text OCR read
    warnings: list[str] = field(default_factory=list)  # what the parser could not read, in one line each
    page_titles: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)

    def page_at(self, offset: int) -> int | None:
        """The 1-based page number holding character ``offset``, or None for paged-less documents."""
        if not self.page_offsets:
            return None
        lo, hi = 0, len(self.page_offsets) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.page_offsets[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    @classmethod
    def from_pages(cls, pages: list[str], separator: str = "\n\n", **fields: Any) -> ParsedDocument:
        """Pages joined by ``separator``, with ``page_offsets`` at each page's start (PDF pages,
        OCRed frames); empty text (offsets all 0) when no page has any."""
        offsets: list[int] = []
        parts: list[str] = []
        length = 0
        for text in pages:
            if parts:
                parts.append(separator)
                length += len(separator)
            offsets.append(length)
            parts.append(text)
            length += len(text)
        text = "".join(parts)
        if not text.strip():
            return cls(text="", page_offsets=[0] * len(pages), **fields)
        return cls(text=text, page_offsets=offsets, **fields)


@dataclass(frozen=True)
class Section:
    """A contiguous span ``[start, end)`` of a document's text with a title (possibly empty)."""

    index: int
    title: str
    level: int
    start: int
    end: int
    path: str = ""  # heading breadcrumb, "Parent > Child"; equals title for top-level sections
    summary: str | None = None


@dataclass
class Chunk:
    """A piece of a document ready to embed and index."""

    chunk_id: str
    doc_id: str
    section_index: int
    chunk_index: int
    start: int
    end: int
    page_start: int | None
    page_end: int | None
    header: str
    text: str
    text_hash: str  # sha256 of the embedded text (header + "\n\n" + text)
    n_tokens: int = 0
    truncated: bool = False
    signals: dict[str, Any] = field(
        default_factory=dict
    )  # corpus signals (quarry/retrieval/corpus/signals.py): catalog columns

    @property
    def embed_text(self) -> str:
        return join_header(self.header, self.text)


def join_header(header: str, text: str) -> str:
    """The text that is embedded: the contextual header, a blank line, the chunk text, each without
    the markup that says nothing of what it is about (:func:`without_markup`)."""
    text = without_markup(text)
    return f"{without_markup(header)}\n\n{text}" if header else text


# A Markdown link or image, [anchor](target "title"): the target may hold one level of parentheses.
_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\)")
_TARGET = re.compile(r"[/.#:@]")  # what a URL or path has and an index or a call (``a[i](x)``) does not
# A Markdown table's delimiter row: | --- | :---: | (pipes at the ends optional).
_DELIMITER_ROW = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$\n?", re.M)
# Tags of HTML elements written inside Markdown (their text is kept), and HTML comments.
_HTML_TAG = re.compile(
    r"</?(?:a|abbr|b|big|blockquote|br|center|code|dd|del|details|div|dl|dt|em|figcaption|figure|font|h[1-6]|hr|i"
    r"|iframe|img|ins|kbd|li|mark|ol|p|picture|pre|s|small|source|span|strong|sub|summary|sup|table|tbody|td|th"
    r"|thead|tr|u|ul|video)(?:\s[^<>]*)?/?>|<!--.*?-->",
    re.I | re.S,
)
# Line marks of Markdown's block syntax: a heading's #s, a blockquote's >s, a list item's bullet.
_LINE_MARK = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|(?:>[ \t]?)+|[-*+][ \t]+(?=\S))", re.M)
# A thematic break (a line of three or more *, - or _), and emphasis whose marks pair up in a line
# around words (a single mark opens before a letter or digit: TeX's x_{i}_{j} is not emphasis).
_RULE = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$\n?", re.M)
_STRONG = re.compile(r"(?<![\w*_\\])(\*\*|__)(?=[^\s*_])([^\n]*?[^\s*_\\])\1(?![\w*_])")
_EMPHASIS = re.compile(
    r"(?<![\w*\\])\*(?=[^\W_])([^*\n]*?[^\s*\\])\*(?![\w*])|(?<![\w\\])_(?=[^\W_])([^_\n]*?[^\s_\\])_(?!\w)"
)


def without_markup(text: str) -> str:
    """``text`` without the markup an embedding model reads as word pieces that say little of what
    a passage is about:

    - each Markdown link and image written as its anchor (or alt) text alone;
    - a table's delimiter rows (``|---|---|``) and the tags of inline HTML (``<img src=…>``,
      ``<br>``, ``<details>``; their text is kept);
    - the marks of Markdown's syntax: heading ``#``s, list bullets, blockquote ``>``s, thematic
      breaks, emphasis (``**bold**``, ``*em*``, ``_em_``) and backticks (a code fence keeps its
      language word).

    On a Markdown handbook these are a third of the tokens: link targets a fifth, delimiter rows
    8%, HTML tags 4%, the syntax marks 5% of the rest (docs/benchmarks.md). The chunk's stored
    and BM25 text keep all of it, so a search for a URL or a file name still finds the passage.
    Brackets followed by parentheses with no ``/ . # : @`` inside are left alone (code:
    ``f[i](x)``), only known HTML elements' tags are (``List<String>`` stays), and emphasis is
    only taken where its marks pair up within a line around words (``snake_case``, ``a * b`` and
    ``**kwargs`` stay).
    """
    if "](" in text:
        text = _LINK.sub(lambda m: m.group(2) if _TARGET.search(m.group(3)) else m.group(0), text)
    if "---" in text:
        text = _DELIMITER_ROW.sub("", text)
    if "<" in text:
        text = _HTML_TAG.sub(" ", text)  # a space: "a<br>b" stays two words
    text = _RULE.sub("", text)  # before the bullets: "* * *" and "- - -" are breaks, not list items
    text = _LINE_MARK.sub("", text)
    if "*" in text or "_" in text:
        text = _STRONG.sub(r"\2", text)
        text = _EMPHASIS.sub(lambda m: m.group(1) or m.group(2), text)
    return text.replace("`", "") if "`" in text else text


def text_hash(embed_text: str) -> str:
    """The key of an embedded text's vector (``Chunk.text_hash``, the LanceDB rows' ``text_hash``):
    the sha256 of its UTF-8 bytes."""
    return hashlib.sha256(embed_text.encode("utf-8")).hexdigest()


@dataclass
class DocumentRecord:
    """A parsed, sectioned and chunked document, as the load stage writes it."""

    doc_id: str
    file: FileInfo
    title: str
    summary: str
    sections: list[Section]
    chunks: list[Chunk]
    metadata: dict[str, str] = field(default_factory=dict)
    n_pages: int | None = None
    ocr_pages: int = 0
    ocr_seconds: float = 0.0
    page_offsets: list[int] = field(default_factory=list)  # where each page starts in the parsed text
    ocr_page_numbers: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the parser's and the chunker's, for the document view
    signals: dict[str, Any] = field(
        default_factory=dict
    )  # corpus signals (quarry/retrieval/corpus/signals.py): catalog columns


@dataclass(frozen=True)
class FileError:
    """A file that could not be indexed, and why."""

    path: str
    error: str


# --- the run report --------------------------------------------------------------------------

# Pipeline stages in the order a batch meets them; ``durations`` holds one entry per stage that ran.
STAGES = ("discover", "plan", "parse", "section", "context", "chunk", "embed", "load", "commit")
_JSON = {"json": True}  # field metadata: stored as a JSON column, a list or dict in Python


# The LLM counters of a run report, in the order logs print them (one list: the LLM runtime fills
# them, tasks log them, the flow sums them, the CLI shows them).
LLM_COUNTERS = ("llm_calls", "llm_cached", "llm_prompt_tokens", "llm_completion_tokens")


@dataclass
class RunReport:
    """What one index run did: the ``runs`` row, the journal line, ``quarry runs --json`` and the
    flow's return value all come from these fields (``tests/test_run_report.py`` checks the
    ``runs`` table of ``sql/schema.sql`` against them).

    ``durations`` maps a stage of :data:`STAGES` to ``{"seconds", "busy_seconds", "rows",
    "rows_per_s"}``, plus ``"total"`` (the run's wall time); see :class:`StageClock`.
    """

    run_id: str
    started: datetime
    finished: datetime | None = None
    # completed; partial (some files or roots failed); skipped (the store was busy); refused (the
    # deletion guard stopped it before it wrote anything); rollback (`quarry rollback`)
    status: str = "completed"
    runner: str = ""  # the task runner that ran the batches: threads, processes, dask, ray
    roots: list[str] = field(default_factory=list, metadata=_JSON)
    added: int = 0
    updated: int = 0
    moved: int = 0
    deleted: int = 0
    skipped: int = 0
    unsupported: int = 0
    failed: int = 0
    chunks: int = 0
    embedded_chunks: int = 0
    reused_vectors: int = 0
    model_calls: int = 0
    truncated: int = 0
    llm_calls: int = 0
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    llm_cached: int = 0
    llm_fallback_windows: list[dict[str, Any]] = field(
        default_factory=list, metadata=_JSON
    )  # [{"path", "kind", "window", "error"}]
    ocr_pages: int = 0
    ocr_seconds: float = 0.0
    permissions_updated: int = 0  # documents whose principals changed (rules, file modes), none re-parsed
    errors: list[dict[str, Any]] = field(default_factory=list, metadata=_JSON)  # [{"path", "error"}]
    durations: dict[str, dict[str, Any]] = field(default_factory=dict, metadata=_JSON)
    settings: dict[str, Any] = field(default_factory=dict, metadata=_JSON)  # secrets masked
    unsupported_files: list[dict[str, Any]] = field(
        default_factory=list, metadata=_JSON
    )  # [{"path", "reason"}], the first 1,000
    message: str = ""  # why a run was skipped or refused, what a rollback did

    @classmethod
    def json_fields(cls) -> tuple[str, ...]:
        """Fields stored as JSON columns."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("json"))

    @classmethod
    def counters(cls) -> tuple[str, ...]:
        """The numeric fields: what a run counts."""
        return tuple(f.name for f in fields(cls) if f.type in ("int", "float"))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunReport:
        """A report from a ``runs`` row, a journal line or ``to_dict()`` output; fields a row from an
        older quarry lacks (or holds as NULL) take their defaults, and unknown keys are ignored."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = row.get(f.name)
            if value is None:
                continue
            if f.metadata.get("json") and isinstance(value, str):
                value = json.loads(value)
            elif f.name in ("started", "finished") and isinstance(value, str):
                value = datetime.fromisoformat(value.rstrip("Z"))
            values[f.name] = value
        values.setdefault("run_id", "")
        values.setdefault("started", datetime.fromtimestamp(0))
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        """The ``runs`` row: timestamps as datetimes, JSON columns as JSON text."""
        row = asdict(self)
        for name in self.json_fields():
            row[name] = json.dumps(row[name], ensure_ascii=False)
        return row

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values: timestamps as ISO text with a ``Z`` (UTC), as ``quarry runs --json`` prints them."""
        out = asdict(self)
        for name in ("started", "finished"):
            if isinstance(out[name], datetime):
                out[name] = out[name].isoformat() + "Z"
        return out

    def finished_with(self, commit_seconds: float) -> RunReport:
        """A copy finished now, whose durations add the ``commit`` stage and the run's ``total``."""
        finished = datetime.now(UTC).replace(tzinfo=None)
        durations = {k: v for k, v in self.durations.items() if k != "total"}
        durations["commit"] = {
            "seconds": round(commit_seconds, 6),
            "busy_seconds": round(commit_seconds, 6),
            "rows": 0,
            "rows_per_s": None,
        }
        total = round((finished - self.started).total_seconds(), 6)
        durations["total"] = {"seconds": total, "busy_seconds": None, "rows": None, "rows_per_s": None}
        return replace(self, finished=finished, durations=durations)

    @classmethod
    def skipped_run(
        cls, run_id: str, started: datetime, finished: datetime, roots: list[str], reason: str, settings: dict[str, Any]
    ) -> RunReport:
        """The report of a run that stood down because ``reason`` (the store was busy): every count zero."""
        return cls(
            run_id=run_id,
            started=started,
            finished=finished,
            status="skipped",
            roots=list(roots),
            runner=settings.get("runner", ""),
            errors=[{"path": None, "error": reason}],
            settings=settings,
            message=reason,
        )


class StageClock:
    """Wall time, busy time and rows per pipeline stage.

    Each piece of work is a span ``(start, end)`` in epoch seconds (``time.time()``, so that the
    spans of worker processes on the same machine line up with the flow's). Stages overlap (batch
    N+1 parses while batch N embeds; batches run side by side on a distributed runner), so per
    stage there are two times: ``seconds``, its wall time (while any batch was in it: the union
    of its spans), and ``busy_seconds``, the sum of its spans (more than ``seconds`` when batches
    ran side by side). ``rows_per_s`` is rows over wall time. Stages add up to more than the
    run's ``total`` when they overlapped.
    """

    def __init__(self) -> None:
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.rows: dict[str, int] = defaultdict(int)

    def add(self, stage: str, seconds: float, rows: int = 0, start: float | None = None) -> None:
        """Record ``seconds`` of ``stage`` that began at ``start`` (default: ended now)."""
        start = time.time() - seconds if start is None else start
        self.spans[stage].append((start, start + seconds))
        self.rows[stage] += rows

    def merge(self, spans: dict[str, list[tuple[float, float]]], rows: dict[str, int]) -> None:
        """Add another clock's spans and rows (a batch timed in a worker)."""
        for stage, items in spans.items():
            self.spans[stage].extend(items)
        for stage, n in rows.items():
            self.rows[stage] += n

    @contextmanager
    def timing(self, stage: str, rows: int = 0) -> Iterator[None]:
        """Time the ``with`` block as part of ``stage`` (an OpenTelemetry span when tracing is on; the
        stage is on the block's JSON log lines)."""
        from quarry.core import logs, tracing

        start, t = time.time(), time.perf_counter()
        try:
            with (
                tracing.span(f"quarry.{stage}", **{"quarry.stage": stage, "quarry.rows": rows}),
                logs.bind(stage=stage),
            ):
                yield
        finally:
            self.add(stage, time.perf_counter() - t, rows, start)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """``{stage: {"seconds", "busy_seconds", "rows", "rows_per_s"}}`` in pipeline order."""
        out: dict[str, dict[str, Any]] = {}
        for stage in [s for s in STAGES if s in self.spans] + [s for s in self.spans if s not in STAGES]:
            wall, busy, rows = _union(self.spans[stage]), sum(b - a for a, b in self.spans[stage]), self.rows[stage]
            out[stage] = {
                "seconds": round(wall, 6),
                "busy_seconds": round(busy, 6),
                "rows": rows,
                "rows_per_s": round(rows / wall, 1) if wall > 0 and rows else None,
            }
        return out


def _union(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``spans``."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total
