"""Turn a file into a ParsedDocument: text, title, headings and (for PDF) page offsets.

Each format lives in its own module and imports its library (pypdf, python-docx,
selectolax) only when called, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
import os

from quarry.errors import ParseError, QuarryError, UnsupportedFile
from quarry.models import ParsedDocument

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
        raise UnsupportedFile(f"unsupported file type: {os.path.basename(path)}")
    module, name = _PARSERS[kind]
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ParseError(f"cannot read file: {one_line(exc)}") from exc
    if not data:  # empty, whatever the type: counted as an empty document, not a failure
        return ParsedDocument(text="")
    try:
        parse = getattr(importlib.import_module(module), name)
        return parse(data, kind) if name == "parse_text" else parse(data)
    except QuarryError:
        raise
    except ImportError as exc:
        raise ParseError(f"cannot parse {kind}: {exc.name} is not installed (pip install -e .)") from exc
    except Exception as exc:  # anything a library raises on odd input is this file's problem
        raise ParseError(f"cannot parse {kind}: {one_line(exc)}") from exc


def one_line(exc: BaseException) -> str:
    """``exc`` as ``"Type: first line of message"``, for one-line error reports."""
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__
