"""Mail: EML and MBOX (stdlib ``email``), Outlook MSG (extract-msg).

Headers become document metadata, so they filter: ``from`` ("Name <addr>", as written),
``from_address`` (the bare, lower-cased address: ``--where "metadata.from_address = 'a@b.org'"``),
``to``, ``cc``, ``date`` (ISO 8601), ``subject``, ``message_id``. The body is the text/plain
part; HTML only when there is no plain part (read by the HTML parser).

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

from quarry.core.errors import ParseError, QuarryError
from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers import one_line

MAX_ATTACHMENT_BYTES = 50 << 20
MAX_MESSAGES = 100_000
_MBOX_SPLIT = re.compile(rb"(?:^|\n)From [^\n]*\n")


def parse_mail(data: bytes, kind: str = "eml") -> ParsedDocument:
    """Parse an ``eml``, ``msg`` or ``mbox`` file (see the module docstring)."""
    if kind == "msg":
        return _msg(data)
    if kind == "mbox":
        return _mbox(data)
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not message.keys():
        raise ParseError("not an email message: no headers")
    headers = _headers(message)
    body = _body(message)
    return _document(headers, body, _attachments(message))


def _headers(message) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in ("from", "to", "cc", "subject", "message-id"):
        try:
            value = message.get(key)
        except Exception:  # a malformed header costs its own value only
            value = None
        if value:
            out[key.replace("-", "_")] = " ".join(str(value).split())
    try:
        date = email.utils.parsedate_to_datetime(str(message.get("date"))) if message.get("date") else None
    except (TypeError, ValueError):
        date = None
    if date is not None:
        out["date"] = date.isoformat()
    _address(out)
    return out


def _address(out: dict[str, str]) -> None:
    if "from" in out:
        _name, addr = email.utils.parseaddr(out["from"])
        if addr:
            out["from_address"] = addr.lower()


def _body(message) -> str:
    try:
        part = message.get_body(preferencelist=("plain", "html"))
    except Exception:
        part = None
    if part is None:
        return ""
    try:
        content = part.get_content()
    except Exception:  # unknown charset or broken transfer encoding
        content = (part.get_payload(decode=True) or b"").decode("utf-8", "replace")
    if isinstance(content, bytes):
        content = content.decode("utf-8", "replace")
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
        except Exception:
            payload = b""
        if name:
            out.append((name, payload))
    return out


def _document(headers: dict[str, str], body: str, attachments: list[tuple[str, bytes]]) -> ParsedDocument:
    from quarry.ingest.parsers import file_type_for, parse_bytes

    lines = [f"{label}: {headers[key]}" for key, label in
             (("subject", "Subject"), ("from", "From"), ("to", "To"), ("cc", "Cc"), ("date", "Date")) if key in headers]
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
        msg = extract_msg.openMsg(data, delayAttachments=False)
    except Exception as exc:
        raise ParseError(f"corrupt MSG: {one_line(exc)}") from exc
    try:
        headers: dict[str, str] = {}
        for key, value in (("from", msg.sender), ("to", msg.to), ("cc", msg.cc), ("subject", msg.subject),
                           ("message_id", msg.messageId)):
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
