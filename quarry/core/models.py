"""Plain data exchanged between the pipeline stages.

Everything here is a small, picklable dataclass so that a batch can travel between
Prefect tasks, threads or (later) Dask/Ray workers without a custom serialiser.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FileInfo", "Heading", "ParsedDocument", "Section", "Chunk", "DocumentRecord", "FileError", "join_header",
           "HEADER_FIELDS", "RETRIEVERS", "SEARCH_MODES"]

# The lines a chunk header may hold, in the order they are written (quarry/ingest/context.py).
HEADER_FIELDS = ("title", "summary", "section", "section_summary", "chunk_context")
# The retrievers of a hybrid search, and the search modes: both fused, or one alone.
RETRIEVERS = ("vector", "bm25")
SEARCH_MODES = ("hybrid", *RETRIEVERS)


@dataclass(frozen=True)
class FileInfo:
    """A file found by discovery."""

    path: str  # absolute, resolved path
    root: str  # the root it was found under (absolute)
    rel_path: str  # path relative to root, POSIX separators
    file_type: str  # a name from quarry.ingest.parsers.FORMATS ("md", "pdf", "pptx", ...), or "" when unsupported
    size: int
    mtime: float
    sha256: str


@dataclass(frozen=True)
class Heading:
    """A heading found by a parser: its level (1 = top), title and character offset in the text."""

    level: int
    title: str
    offset: int


@dataclass
class ParsedDocument:
    """A document's text with the structure a parser could recover.

    ``page_offsets[i]`` is the character offset where page ``i + 1`` starts (PDF pages, PPTX
    slides, TIFF frames);
    ``headings`` are sorted by offset.
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

    @property
    def embed_text(self) -> str:
        return join_header(self.header, self.text)


def join_header(header: str, text: str) -> str:
    """The text that is embedded: the contextual header, a blank line, the chunk text."""
    return f"{header}\n\n{text}" if header else text


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


@dataclass(frozen=True)
class FileError:
    """A file that could not be indexed, and why."""

    path: str
    error: str
