"""Content sniffing for files whose extension quarry does not know (``README``, ``notes.dat``).

Magic bytes first (PDF, ZIP-based Office/OpenDocument/EPUB by their member names, OLE2 mail
and legacy Office by their stream names, images, RTF), then text detection on the first
8 KiB: text that decodes cleanly is read as HTML, XML, mail, JSON, Markdown or plain text by
its first lines. Anything else stays unsupported and is counted, not opened again.
"""

from __future__ import annotations

import json
import re
import zipfile

from quarry.core.errors import ParseError

HEAD = 8192
_IMAGES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*", b"BM", b"GIF87a", b"GIF89a")
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ODF = {
    "application/vnd.oasis.opendocument.text": "odt",
    "application/vnd.oasis.opendocument.spreadsheet": "ods",
    "application/epub+zip": "epub",
}
_OOXML = (("word/", "docx"), ("ppt/", "pptx"), ("xl/", "xlsx"))
_MAIL_HEADER = re.compile(r"^(Received|Return-Path|From|Message-ID|MIME-Version|Delivered-To):", re.I | re.M)
_MD = re.compile(r"^(#{1,6} \S|```|\* \S|- \S|\[.+\]\(.+\))", re.M)


def sniff_file(path: str) -> str:
    """The file type of ``path`` judged by its content, or "" when it is not something quarry reads."""
    from quarry.core.errors import ParseError
    from quarry.core.safeio import open_regular

    try:
        with open_regular(path) as fh:  # never blocks on a FIFO put in a file's place
            head = fh.read(HEAD)
    except (OSError, ParseError):
        return ""
    if not head:
        return ""
    kind = sniff_binary(head, path)
    if kind is not None:
        return kind
    return sniff_text(head)


def sniff_bytes(data: bytes) -> str | None:
    """The type of a whole file's bytes by their signature (``sniff_binary`` on bytes in memory)."""
    import io

    return sniff_binary(data[:HEAD], io.BytesIO(data))


def sniff_binary(head: bytes, path) -> str | None:
    """A type for a known binary signature; "" for a binary quarry cannot read; None for not binary.

    ``path`` is the file's path or a binary file object holding it (ZIP and OLE files are told
    apart by their member names)."""
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"{\\rtf"):
        return "rtf"
    if head.startswith(_IMAGES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return "image"
    if head.startswith(b"PK\x03\x04"):
        return _zip_type(path)
    if head.startswith(_OLE):
        return _ole_type(path)
    return None


def _zip_type(path) -> str:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            if "mimetype" in names:
                return _ODF.get(zf.read("mimetype")[:100].decode("ascii", "replace").strip(), "")
    except (zipfile.BadZipFile, OSError, KeyError, RuntimeError):
        return ""
    if "[Content_Types].xml" in names:
        for prefix, kind in _OOXML:
            if any(n.startswith(prefix) for n in names):
                return kind
    return ""


def _ole_type(path) -> str:
    try:
        import olefile

        with olefile.OleFileIO(path) as ole:
            streams = {"/".join(s) for s in ole.listdir()}
    except Exception:  # noqa: BLE001 - not readable as OLE: sniffed by its other signs
        return ""
    if any(s.startswith("__substg1.0_") for s in streams):
        return "msg"
    if "WordDocument" in streams:
        return "doc"
    if "Workbook" in streams or "Book" in streams:
        return "xls"
    if "PowerPoint Document" in streams:
        return "ppt"
    return ""


def sniff_text(head: bytes) -> str:
    """A text type for ``head`` when it decodes as text, else ""."""
    from quarry.ingest.parsers.text import decode_bytes

    try:
        text = decode_bytes(head if len(head) < HEAD else _whole_chars(head))
    except (ParseError, UnicodeError):
        return ""
    stripped = text.lstrip("\ufeff \n\t")
    low = stripped[:200].lower()
    if low.startswith(("<!doctype html", "<html")):
        return "html"
    if low.startswith("<?xml"):
        return "xml"
    if stripped.startswith("From ") and _MAIL_HEADER.search(stripped[:2000]):
        return "mbox"
    if len(_MAIL_HEADER.findall(stripped[:2000])) >= 2 and re.search(r"^Subject:", stripped, re.I | re.M):
        return "eml"
    if stripped[:1] in "{[" and len(head) < HEAD:
        try:
            json.loads(text)
            return "json"
        except ValueError:
            pass
    return "md" if len(_MD.findall(text)) >= 2 else "txt"


def _whole_chars(head: bytes) -> bytes:
    # The 8 KiB cut may split a UTF-8 character; drop the partial tail so UTF-8 still decodes.
    for cut in range(len(head), max(len(head) - 4, 0), -1):
        try:
            head[:cut].decode("utf-8")
            return head[:cut]
        except UnicodeDecodeError:
            continue
    return head
