"""Turn a file into a ParsedDocument: text, title, headings and (for PDF) page offsets.

Each format lives in its own module and imports its library (pypdf, python-docx,
selectolax) only when called, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
import os
import re

from quarry.errors import ParseError, QuarryError, UnsupportedFile
from quarry.models import Heading, ParsedDocument
from quarry.paths import display
from quarry.safeio import read_regular

SUPPORTED: dict[str, str] = {
    ".md": "md",
    ".markdown": "md",
    ".mdx": "md",
    ".txt": "txt",
    ".text": "txt",
    ".rst": "rst",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}

# file_type -> (module, function); the function takes the file's bytes.
_PARSERS = {
    "md": ("quarry.parsers.text", "parse_text"),
    "txt": ("quarry.parsers.text", "parse_text"),
    "rst": ("quarry.parsers.text", "parse_text"),
    "html": ("quarry.parsers.html", "parse_html"),
    "pdf": ("quarry.parsers.pdf", "parse_pdf"),
    "docx": ("quarry.parsers.docx", "parse_docx"),
}


def file_type_for(path: str) -> str:
    """The file type quarry reads ``path`` as ("md", "pdf", ...), or "" when unsupported."""
    return SUPPORTED.get(os.path.splitext(path)[1].lower(), "")


def parse_file(path: str, file_type: str | None = None) -> ParsedDocument:
    """Parse the file at ``path`` (its type from the suffix unless ``file_type`` is given).

    Raises UnsupportedFile for a type quarry does not read, and ParseError, with a one-line
    reason, for a supported file that cannot be read. No library exception escapes.
    """
    kind = file_type if file_type is not None else file_type_for(path)
    if kind not in _PARSERS:
        raise UnsupportedFile(f"unsupported file type: {display(os.path.basename(path))}")
    module, name = _PARSERS[kind]
    # Never blocks on a FIFO, refuses what is not a regular file, hashes exactly what is parsed.
    data, digest = read_regular(path, limit=max_file_bytes())
    if not data:  # empty, whatever the type: counted as an empty document, not a failure
        return ParsedDocument(text="", sha256=digest)
    try:
        parse = getattr(importlib.import_module(module), name)
        doc = parse(data, kind) if name == "parse_text" else parse(data)
        del data
        return sanitize(doc, digest)
    except QuarryError:
        raise
    except ImportError as exc:
        raise ParseError(f"cannot parse {kind}: {exc.name} is not installed (pip install -e .)") from exc
    except Exception as exc:  # anything a library raises on odd input is this file's problem
        raise ParseError(f"cannot parse {kind}: {one_line(exc)}") from exc


def max_file_bytes() -> int:
    """The largest file quarry reads (``QUARRY_MAX_FILE_MB``, default 256; 0 = no limit).

    A parser holds a file's bytes and text at once, so this bounds a worker's memory."""
    try:
        return int(float(os.environ.get("QUARRY_MAX_FILE_MB", "256")) * (1 << 20))
    except ValueError:
        return 256 << 20


# NUL (some exporters leave them; DuckDB strings and C libraries stop at them) becomes a space
# and a lone surrogate (from a broken PDF font map) the replacement character: one character
# for one, so offsets of headings and pages stay true.
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_MAX_TITLE = 500
_MAX_META = 2000


def _clean(text: str) -> str:
    return _BAD_CHARS.sub(lambda m: " " if m.group() == "\x00" else "\ufffd", text) if text else text


def sanitize(doc: ParsedDocument, digest: str | None = None) -> ParsedDocument:
    """``doc`` with text every store accepts (no NUL, no lone surrogates) and bounded titles and
    metadata (a hostile file can put a megabyte in its title), stamped with ``digest``."""
    doc.text = _clean(doc.text)
    if doc.title:
        doc.title = _clean(doc.title)[:_MAX_TITLE]
    doc.headings = [Heading(h.level, _clean(h.title)[:_MAX_TITLE], h.offset) for h in doc.headings]
    doc.metadata = {_clean(str(k))[:100]: _clean(str(v))[:_MAX_META] for k, v in doc.metadata.items()}
    doc.sha256 = digest
    return doc


def one_line(exc: BaseException) -> str:
    """``exc`` as ``"Type: first line of message"``, for one-line error reports."""
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__
