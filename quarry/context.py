"""Contextual chunk headers, in the spirit of dsRAG's AutoContext.

A header tells the embedder and BM25 what a chunk is part of: the document's title and the
section's heading path. The :class:`ContextWriter` protocol is the seam an LLM writer plugs
into; :class:`RuleContextWriter` needs no model.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Protocol

from quarry.models import FileInfo, ParsedDocument, Section

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_HEADING_LINE = re.compile(r"^\s*(#{1,6}\s|[=\-~^*+#]{3,}\s*$)")
_JUNK_TITLE = re.compile(r"^(untitled|document\d*|microsoft word - .*|slide \d+|\W*)$", re.IGNORECASE)
SUMMARY_CHARS = 300


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


class RuleContextWriter:
    """Title from metadata, first heading, or file name; summary from the opening prose."""

    name = "rules"

    def document_context(self, doc: ParsedDocument, file: FileInfo, sections: list[Section]) -> tuple[str, str]:
        title = _clean_title(doc.title)
        if not title:
            first = next((h for h in doc.headings if h.title.strip()), None)
            title = _clean_title(first.title if first else "")
        if not title:
            title = title_from_filename(file.rel_path)
        return title, extractive_summary(doc.text)

    def header(self, title: str, summary: str, section: Section) -> str:
        path = section.path or section.title
        if path == title:
            path = ""
        elif path.startswith(title + " > "):
            path = path[len(title) + 3 :]  # the top heading repeats the document title
        lines = [f"Document: {title}"]
        if path:
            lines.append(f"Section: {path}")
        return "\n".join(lines)


def get_context_writer(name: str) -> ContextWriter:
    """The context writer called ``name``."""
    if name == "rules":
        return RuleContextWriter()
    raise ValueError(f"unknown context writer {name!r}")
