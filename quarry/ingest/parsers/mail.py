"""Mail: EML and MBOX (stdlib ``email``), Outlook MSG (extract-msg).

Headers become document metadata, so they filter: ``from`` ("Name <addr>", as written),
``from_address`` (the bare, lower-cased address: ``--where "metadata.from_address = 'a@b.org'"``),
``to``, ``cc``, ``date`` (ISO 8601), ``subject``, ``message_id``. The body is the text/plain
part; HTML only when there is no plain part (read by the HTML parser).

A message saved in a Unicode form (UTF-16 LE/BE with or without a byte-order mark, as Outlook
and Windows tools write it, or UTF-8 with a BOM) is read as the same message in UTF-8; parts and
headers in legacy charsets are decoded by the charset they declare, else by detection
(charset-normalizer), never left as escape bytes.

Attachments of a supported format are parsed with their own parser and appended as sections
titled ``Attachment: <name>``, so their words find the message; ``metadata.attachments`` lists
every attachment by name. (Indexing each as its own linked document needs derived documents
in the change plan; see docs/ARCHITECTURE.md "Mail attachments".)
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import re
from typing import TYPE_CHECKING, Any

from quarry.core.errors import ParseError, QuarryError
from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers import one_line

if TYPE_CHECKING:
    from extract_msg.msg_classes import MessageBase

MAX_ATTACHMENT_BYTES = 50 << 20
MAX_MESSAGES = 100_000
_MBOX_SPLIT = re.compile(rb"(?:^|\n)From [^\n]*\n")


def parse_mail(data: bytes, kind: str = "eml") -> ParsedDocument:
    """Parse an ``eml``, ``msg`` or ``mbox`` file (see the module docstring)."""
    if kind == "msg":
        return _msg(data)
    data = as_8bit(data)
    if not data.strip():
        return ParsedDocument(text="")  # blank: an empty message, not a broken one
    if kind == "mbox":
        return _mbox(data)
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not message.keys():
        raise ParseError("not an email message: no headers")
    headers = _headers(message)
    body = _body(message)
    return _document(headers, body, _attachments(message))


def as_8bit(data: bytes) -> bytes:
    """Mail bytes as the ``email`` package reads them: a message stored as UTF-16 (with or without
    a BOM) or UTF-8 with a BOM becomes the same message in UTF-8 (its parts' declared charsets
    were written for the text, which now is UTF-8 again)."""
    from quarry.ingest.parsers.text import unicode_codec

    codec = unicode_codec(data[:8192])
    if codec is None:
        return data
    return data.decode(codec, errors="replace").lstrip("\ufeff").encode("utf-8")


def _headers(message) -> dict[str, str]:
    out: dict[str, str] = {}
    charset = _declared_charset(message)
    raw: dict[str, Any] = {}
    for name, value in message.raw_items():
        raw.setdefault(name.lower(), value)
    for key in ("from", "to", "cc", "subject", "message-id"):
        try:
            value = message.get(key)
        except Exception:  # noqa: BLE001 - a malformed header costs its own value only
            value = None
        if value:
            # raw 8-bit bytes (no RFC 2047 encoding) come through as escape surrogates in the source
            text = _unescape(raw[key], charset) if _escaped(raw.get(key, "")) else str(value)
            out[key.replace("-", "_")] = " ".join(text.split())
    try:
        date = email.utils.parsedate_to_datetime(str(message.get("date"))) if message.get("date") else None
    except (TypeError, ValueError):
        date = None
    if date is not None:
        out["date"] = date.isoformat()
    _address(out)
    return out


def _declared_charset(message) -> str | None:
    try:
        return message.get_content_charset() or next(
            (p.get_content_charset() for p in message.walk() if p.get_content_charset()), None
        )
    except Exception:  # noqa: BLE001 - a malformed Content-Type costs the declared charset only
        return None


def _escaped(value) -> bool:
    return isinstance(value, str) and any("\udc80" <= ch <= "\udcff" for ch in value)


def _unescape(value: str, charset: str | None) -> str:
    """A header written in raw 8-bit bytes (no RFC 2047 encoding) reaches Python as escape
    surrogates: decode those bytes by the message's charset, else by detection."""
    return _decode_payload(value.encode("utf-8", "surrogateescape"), charset)


def _decode_payload(raw: bytes, charset: str | None) -> str:
    """Bytes of a part (or header) in the charset it declares, else the one detected."""
    if charset:
        try:
            return raw.decode(_codec(charset))
        except (LookupError, UnicodeDecodeError):
            pass
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if len(raw) >= 128:  # detection needs a sentence or two; a header is read as Windows' Western default
        import charset_normalizer

        best = charset_normalizer.from_bytes(raw).best()
        if best is not None:
            return str(best)
    return raw.decode("cp1252", "replace")


def _codec(charset: str) -> str:
    import codecs

    name = charset.strip().strip('"').lower()
    aliases = {
        "ks_c_5601-1987": "cp949",
        "x-sjis": "shift_jis",
        "x-gbk": "gbk",
        "iso-8859-8-i": "iso-8859-8",
        "windows-874": "cp874",
        "x-mac-roman": "mac_roman",
        "unicode-1-1-utf-7": "utf-7",
    }
    return codecs.lookup(aliases.get(name, name)).name


def _address(out: dict[str, str]) -> None:
    if "from" in out:
        _name, addr = email.utils.parseaddr(out["from"])
        if addr:
            out["from_address"] = addr.lower()


def _body(message) -> str:
    try:
        part = message.get_body(preferencelist=("plain", "html"))
    except Exception:  # noqa: BLE001 - a malformed MIME tree: the body reads as empty, the headers still count
        part = None
    if part is None:
        return ""
    try:
        content = part.get_content()
        if isinstance(content, str) and "\ufffd" in content:  # a charset the text does not match
            raise UnicodeError
    except Exception:  # noqa: BLE001 - unknown or wrong charset, or a broken transfer encoding
        content = _decode_payload(part.get_payload(decode=True) or b"", part.get_content_charset())
    if isinstance(content, bytes):
        content = _decode_payload(content, part.get_content_charset())
    if part.get_content_subtype() == "html":
        from quarry.ingest.parsers.html import parse_html

        return parse_html(content.encode("utf-8")).text
    return content.replace("\r\n", "\n").strip()


def _attachments(message) -> list[tuple[str, bytes]]:
    out = []
    for part in message.iter_attachments() if message.is_multipart() else ():
        name = part.get_filename() or ""
        try:
            payload = part.get_payload(decode=True) or b""
        except Exception:  # noqa: BLE001 - a broken transfer encoding costs this attachment's bytes only
            payload = b""
        if name:
            out.append((name, payload))
    return out


def _document(headers: dict[str, str], body: str, attachments: list[tuple[str, bytes]]) -> ParsedDocument:
    from quarry.ingest.parsers import file_type_for, parse_bytes

    lines = [
        f"{label}: {headers[key]}"
        for key, label in (("subject", "Subject"), ("from", "From"), ("to", "To"), ("cc", "Cc"), ("date", "Date"))
        if key in headers
    ]
    parts = ["\n".join(lines), body] if body else ["\n".join(lines)]
    text = "\n\n".join(p for p in parts if p)
    headings = [Heading(1, headers["subject"], 0)] if headers.get("subject") else []
    for name, payload in attachments:
        kind = file_type_for(name)
        if not kind or kind in ("image",) or len(payload) > MAX_ATTACHMENT_BYTES:
            continue  # listed in metadata; images would need OCR inside a message: not worth it
        try:
            # OCR stays off here: an attachment must not make its message hit the file timeout.
            inner = parse_bytes(payload, kind, ocr=False).text.strip()
        except QuarryError:
            continue
        if inner:
            text += "\n\n"
            headings.append(Heading(1, f"Attachment: {name}", len(text)))
            text += f"Attachment: {name}\n\n{inner}"
    metadata = dict(headers)
    if attachments:
        metadata["attachments"] = ", ".join(name for name, _ in attachments)
    return ParsedDocument(text=text, title=headers.get("subject"), headings=headings, metadata=metadata)


def _msg(data: bytes) -> ParsedDocument:
    import extract_msg

    try:
        # openMsg is annotated as returning an MSGFile; a mail opens as a MessageBase, whose headers
        # are read below (another kind of MSG fails on the first of them, as it always did)
        msg: MessageBase = extract_msg.openMsg(data, delayAttachments=False)  # type: ignore[assignment]
    except Exception as exc:
        raise ParseError(f"corrupt MSG: {one_line(exc)}") from exc
    try:
        headers: dict[str, str] = {}
        for key, value in (
            ("from", msg.sender),
            ("to", msg.to),
            ("cc", msg.cc),
            ("subject", msg.subject),
            ("message_id", msg.messageId),
        ):
            if value:
                headers[key] = " ".join(str(value).split())
        if msg.date is not None:
            headers["date"] = msg.date.isoformat() if hasattr(msg.date, "isoformat") else str(msg.date)
        _address(headers)
        body = (msg.body or "").replace("\r\n", "\n").strip()
        if not body and msg.htmlBody:
            from quarry.ingest.parsers.html import parse_html

            body = parse_html(msg.htmlBody).text
        attachments = []
        for att in msg.attachments:
            name = getattr(att, "longFilename", None) or getattr(att, "shortFilename", None) or ""
            payload = getattr(att, "data", None)
            if name and isinstance(payload, bytes):
                attachments.append((name, payload))
    finally:
        msg.close()
    return _document(headers, body, attachments)


def _mbox(data: bytes) -> ParsedDocument:
    """A section per message (titled by its subject); the file's metadata counts the messages."""
    chunks = [c for c in _MBOX_SPLIT.split(data) if c.strip()]
    if not data.startswith(b"From ") or not chunks:
        raise ParseError("not an mbox file: no 'From ' separator line")
    parts: list[str] = []
    headings: list[Heading] = []
    length = 0
    for raw in chunks[:MAX_MESSAGES]:
        # mboxrd escapes body lines that start with "From " as ">From "
        raw = re.sub(rb"(?m)^>(>*From )", rb"\1", raw)
        try:
            doc = parse_mail(raw, "eml")
        except QuarryError:
            continue  # one unreadable message costs itself, not the mailbox
        if not doc.text.strip():
            continue
        if parts:
            parts.append("\n\n")
            length += 2
        headings.append(Heading(1, doc.title or doc.metadata.get("from", "(no subject)"), length))
        headings.extend(Heading(h.level + 1, h.title, length + h.offset) for h in doc.headings if h.offset > 0)
        parts.append(doc.text)
        length += len(doc.text)
    return ParsedDocument(text="".join(parts), headings=headings, metadata={"messages": str(len(headings))})
