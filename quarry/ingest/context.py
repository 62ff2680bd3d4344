"""Contextual chunk headers, in the spirit of dsRAG's AutoContext.

A header tells the embedder and BM25 what a chunk is part of: the document's title (with its
type and period where the parser found them, as for a filing's cover page) and the
section's heading path, and optionally the document's summary, the section's summary and a
per-chunk context line (:data:`HEADER_FIELDS`, composed by :func:`compose_header`). The
:class:`ContextWriter` protocol is the seam; :class:`RuleContextWriter` needs no model, and the
LLM writer (``quarry.ingest.llm.context``) replaces its title and summaries where a model answered.
"""

from __future__ import annotations

import bisect
import re
from pathlib import PurePosixPath
from typing import Protocol

from quarry.core.models import HEADER_FIELDS, FileInfo, ParsedDocument, Section
from quarry.core.registry import CONTEXT_WRITERS

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_HEADING_LINE = re.compile(r"^\s*(#{1,6}\s|[=\-~^*+#]{3,}\s*$)")
_JUNK_TITLE = re.compile(r"^(untitled|document\d*|microsoft word - .*|slide \d+|\W*)$", re.IGNORECASE)
SUMMARY_CHARS = 300
SECTION_SUMMARY_CHARS = 200
DEFAULT_FIELDS = ("title", "section", "page", "table")
PLACE_FIELDS = ("page", "table")  # lines that depend on where in the document a chunk sits


class ContextWriter(Protocol):
    """Writes a document's title and summary and each chunk's header."""

    name: str

    def document_context(self, doc: ParsedDocument, file: FileInfo, sections: list[Section]) -> tuple[str, str]:
        """The document's (title, summary)."""
        ...

    def header(self, title: str, summary: str, section: Section) -> str:
        """The header put in front of every chunk of ``section``."""
        ...


def title_from_filename(rel_path: str) -> str:
    """A readable title from a file name: ``release-notes_2024.md`` -> ``Release notes 2024``."""
    stem = PurePosixPath(rel_path).stem
    words = re.sub(r"[_\-.]+", " ", stem).strip()
    return (words[:1].upper() + words[1:]) if words else rel_path


def _clean_title(title: str | None) -> str:
    title = " ".join((title or "").split())
    return "" if _JUNK_TITLE.match(title) else title[:200]


def extractive_summary(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The opening sentences of the first prose paragraph, up to ``limit`` characters."""
    for para in re.split(r"\n\s*\n", text[:20000]):
        lines = [ln for ln in para.splitlines() if ln.strip() and not _HEADING_LINE.match(ln)]
        prose = " ".join(" ".join(lines).split())
        if len(prose) < 40 or prose.count(" ") < 5:
            continue  # a caption, a link line, a table row
        out = ""
        for sentence in _SENTENCE_END.split(prose):
            if out and len(out) + len(sentence) + 1 > limit:
                break
            out = f"{out} {sentence}".strip()
        return out[:limit]
    return ""


def own_title(doc: ParsedDocument) -> str:
    """The title the document gives itself (metadata, else its first heading), or ""."""
    title = _clean_title(doc.title)
    if not title:
        first = next((h for h in doc.headings if h.title.strip()), None)
        title = _clean_title(first.title if first else "")
    return title


def with_period(title: str, metadata: dict) -> str:
    """The title followed by the document's type and period where its parser found them
    (``metadata["doc_type"]``, ``metadata["period"]``, e.g. a filing's cover page):
    ``3M Company (Form 10-K annual report, fiscal year 2018 (ended December 31, 2018))``.

    Filings of one company from several years share their words; the period in every chunk's
    header is what lets a question that names a year find that year's filing. The company and
    ``FY2018`` go into the document's card only (:mod:`quarry.retrieval.cards`): in every chunk's
    header as well they lowered page recall on FinanceBench's training questions (0.500 →
    0.455 with the document evidence on; bench/longpdf.py)."""
    extra = ", ".join(v for v in (metadata.get("doc_type"), metadata.get("period")) if v)
    return f"{title} ({extra})" if extra and extra not in title else title


def clean_summary(text: str | None, limit: int = SUMMARY_CHARS) -> str:
    """One line of at most ``limit`` characters."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def compose_header(fields: tuple[str, ...], title: str, summary: str, section: Section, chunk_context: str = "") -> str:
    """The header lines ``fields`` ask for, in a fixed order; empty parts are left out.

    With the default fields this is ``Document: <title>`` and ``Section: <path>``, the path
    without a leading repeat of the document title; the ``page`` and ``table`` lines depend on a
    chunk's place, not its section, and are added by :func:`place_lines`.
    """
    path = section.path or section.title
    if path == title:
        path = ""
    elif path.startswith(title + " > "):
        path = path[len(title) + 3 :]  # the top heading repeats the document title
    parts = {
        "title": f"Document: {title}" if title else "",
        "summary": f"Summary: {summary}" if summary else "",
        "section": f"Section: {path}" if path else "",
        "section_summary": f"Section summary: {section.summary}" if section.summary else "",
        "chunk_context": f"Context: {chunk_context}" if chunk_context else "",
    }
    return "\n".join(parts[f] for f in HEADER_FIELDS if f in fields and parts.get(f))


def place_lines(doc: ParsedDocument, fields: tuple[str, ...]):
    """A function ``(section, start, end) -> str``: the header lines that say where a chunk at
    ``[start, end)`` sits, those of ``fields`` among ``page`` and ``table``:

    - ``Page: <title>``: the running title of the page the chunk starts on (the statement or
      section name at its top: ``Consolidated Statement of Cash Flows``), unless the chunk's
      section path already says it;
    - ``Table: <title> (<column headers>)``: the table the chunk is cut from, so that every chunk
      of a long table carries its title and its columns (years, periods).

    ``None`` when the document has neither (most formats): headers stay per section."""
    want_page = "page" in fields and any(doc.page_titles)
    want_table = "table" in fields and bool(doc.tables)
    if not (want_page or want_table):
        return None
    starts = [t.start for t in doc.tables]

    def lines(section: Section, start: int, end: int) -> str:
        out = []
        path = (section.path or section.title).lower()
        if want_page:
            page = doc.page_at(start)
            title = doc.page_titles[page - 1] if page and page <= len(doc.page_titles) else ""
            if title and title.lower() not in path:
                out.append(f"Page: {title}")
        if want_table:
            i = bisect.bisect_left(starts, end) - 1  # the last table that starts before the chunk ends
            if i >= 0 and doc.tables[i].end > start:
                table = doc.tables[i]
                name = table.title or "untitled"
                out.append(f"Table: {name} ({table.columns})" if table.columns else f"Table: {name}")
        return "\n".join(out)

    return lines


def header_fields(settings) -> tuple[str, ...]:
    """The header fields of a run: explicit ``header_fields``, else the context writer's default."""
    if settings.header_fields:
        return () if tuple(settings.header_fields) == ("none",) else tuple(settings.header_fields)
    fields: tuple[str, ...] = (
        ("title", "summary", "section", *PLACE_FIELDS) if settings.context == "llm" else DEFAULT_FIELDS
    )
    if settings.context == "llm" and settings.llm_section_summaries:
        fields += ("section_summary",)
    if settings.llm_chunk_context:
        fields += ("chunk_context",)
    return fields


class RuleContextWriter:
    """Title from metadata, first heading, or file name; summaries from the opening prose."""

    name = "rules"

    def __init__(self, fields: tuple[str, ...] = DEFAULT_FIELDS):
        self.fields = fields

    def document_context(self, doc: ParsedDocument, file: FileInfo, sections: list[Section]) -> tuple[str, str]:
        title = own_title(doc) or title_from_filename(file.rel_path)
        return with_period(title, doc.metadata), extractive_summary(doc.text)

    def section_summary(self, doc: ParsedDocument, section: Section) -> str:
        """The opening sentences of the section's prose (its heading line skipped)."""
        return extractive_summary(doc.text[section.start : section.end], SECTION_SUMMARY_CHARS)

    def header(self, title: str, summary: str, section: Section) -> str:
        return compose_header(self.fields, title, summary, section)


# name -> factory(fields) -> ContextWriter; each writer registers itself where it is written
# (quarry/core/registry.py: CONTEXT_WRITERS; plugins by entry point).


@CONTEXT_WRITERS.register("rules")
def _rules(fields: tuple[str, ...] = DEFAULT_FIELDS) -> ContextWriter:
    return RuleContextWriter(fields)


def get_context_writer(name: str, fields: tuple[str, ...] = DEFAULT_FIELDS) -> ContextWriter:
    """The context writer registered as ``name``; ``llm`` gives the local writer that its batches
    start from (what a model wrote replaces its titles and summaries)."""
    return CONTEXT_WRITERS.get(name)(fields)
