"""Formats quarry recognises but cannot read: a named failure that says what to do."""

from __future__ import annotations

from quarry.core.errors import ParseError

# Legacy binary Office formats: no maintained pure-Python reader of their text exists on PyPI
# (olefile lists the streams; the text needs a full Word/PowerPoint binary decoder).
_MESSAGES = {
    "doc": "unsupported: legacy Word, convert to DOCX",
    "ppt": "unsupported: legacy PowerPoint, convert to PPTX",
}


def parse_unsupported(data: bytes, kind: str) -> None:
    """Always raises ParseError with the format's message."""
    raise ParseError(_MESSAGES.get(kind, f"unsupported: {kind}"))
