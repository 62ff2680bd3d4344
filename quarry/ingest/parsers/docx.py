"""DOCX via python-docx: paragraphs and tables in body order, heading styles as headings."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

from quarry.core.errors import ParseError
from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers import one_line

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_P, _TBL, _SDT, _SDT_CONTENT, _TR, _TC = (_W + t for t in ("p", "tbl", "sdt", "sdtContent", "tr", "tc"))
_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.I)


def parse_docx(data: bytes, kind: str = "docx") -> ParsedDocument:
    """Parse DOCX bytes: paragraphs and tables (rows as ``cell | cell`` lines) in body order.

    Title: the core-properties title, else a ``Title``-style paragraph, else the first heading.
    """
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    check_package_size(data)
    try:
        document = docx.Document(io.BytesIO(data))
    except PackageNotFoundError as exc:
        raise ParseError("corrupt DOCX: not a Word document package") from exc
    except Exception as exc:  # zipfile.BadZipFile, KeyError for a missing part, lxml errors...
        raise ParseError(f"corrupt DOCX: {one_line(exc)}") from exc

    parts: list[str] = []
    length = 0
    headings: list[Heading] = []
    styled_title = None
    for block, style in _blocks(document):
        if not block.strip():
            continue
        if parts:
            parts.append("\n\n")
            length += 2
        level = _heading_level(style)
        if level:
            headings.append(Heading(level, " ".join(block.split()), length))
            if style.lower() == "title" and styled_title is None:
                styled_title = headings[-1].title
        parts.append(block)
        length += len(block)

    metadata = _metadata(document)
    title = metadata.pop("title", None) or styled_title or (headings[0].title if headings else None)
    return ParsedDocument(text="".join(parts), title=title, headings=headings, metadata=metadata)


# A DOCX is a zip; python-docx inflates every part into memory. A "zip bomb" renamed .docx
# (a few KB that inflate to gigabytes) is refused from the sizes its directory declares, which
# zipfile also enforces while reading (it never returns more than a member's declared size).
MAX_UNPACKED = 512 << 20
MAX_MEMBERS = 20_000


def check_package_size(data: bytes, limit: int = MAX_UNPACKED) -> None:
    """ParseError when the zip in ``data`` would inflate past ``limit`` bytes or holds absurdly many parts."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            members = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as exc:
        raise ParseError(f"corrupt DOCX: not a zip package ({one_line(exc)})") from exc
    total = sum(m.file_size for m in members)
    if len(members) > MAX_MEMBERS or total > limit:
        raise ParseError(
            f"refused: DOCX would unpack to {total >> 20} MB in {len(members)} parts "
            f"(limit {limit >> 20} MB, {MAX_MEMBERS} parts): a zip bomb or not a document"
        )


def _blocks(document) -> Iterator[tuple[str, str]]:
    """(text, paragraph style name) for each body paragraph and table, in document order.

    ``document.paragraphs`` and ``document.tables`` are separate lists, so the body's XML
    children are walked instead to keep tables where they stand.
    """
    from docx.text.paragraph import Paragraph

    stack = list(reversed(document.element.body))
    while stack:
        element = stack.pop()
        if element.tag == _P:
            paragraph = Paragraph(element, document)
            yield paragraph.text, _style_name(paragraph)
        elif element.tag == _TBL:
            yield "\n".join(filter(None, (_row_text(tr) for tr in element.iterchildren(_TR)))), ""
        elif element.tag == _SDT:  # content control: its content is ordinary body blocks
            for content in element.iterchildren(_SDT_CONTENT):
                stack.extend(reversed(content))


def _row_text(tr, sep: str = " | ") -> str:
    # Raw w:tc elements rather than python-docx's row.cells, which repeats a merged cell
    # once per grid column; a vertically merged continuation cell is empty and dropped.
    return sep.join(filter(None, (_cell_text(tc) for tc in tr.iterchildren(_TC))))


def _cell_text(tc) -> str:
    from docx.text.paragraph import Paragraph

    pieces = []
    for child in tc:
        if child.tag == _P:
            # no story part: .text reads the runs alone, never the parent python-docx types as required
            pieces.append(Paragraph(child, None).text)  # type: ignore[arg-type]
        elif child.tag == _TBL:  # a nested table, inline as "a, b; c, d" so it cannot pass for columns
            pieces.append("; ".join(filter(None, (_row_text(tr, ", ") for tr in child.iterchildren(_TR)))))
    return " ".join(" ".join(pieces).split())


def _style_name(paragraph) -> str:
    try:
        style = paragraph.style
    except Exception:  # noqa: BLE001 - a dangling style id should not cost the paragraph its text
        return ""
    return (style.name or "") if style is not None else ""


def _heading_level(style: str) -> int:
    if style.lower() == "title":
        return 1
    match = _HEADING_STYLE.match(style)
    return int(match.group(1)) if match else 0


def _metadata(document) -> dict[str, str]:
    try:
        props = document.core_properties
        values = {"title": props.title, "author": props.author, "subject": props.subject}
        values["keywords"] = props.keywords
    except Exception:  # noqa: BLE001 - damaged core properties cost the metadata only
        return {}
    return {key: " ".join(value.split()) for key, value in values.items() if value and value.strip()}
