"""Office documents and e-books: PPTX (python-pptx), ODT (odfpy), RTF (striprtf), EPUB (ebooklib).

PPTX: python-pptx over markitdown. markitdown's PPTX converter is itself python-pptx, rendering
Markdown ("<!-- Slide number: 1 -->", "# title", Markdown tables) that quarry would have to parse
back to find slide boundaries; ``markitdown[pptx]`` also adds magika (a file-type model) and
markdownify. Measured here on ``fake-power-point-table.pptx`` (10 conversions, machine shared):
markitdown 0.1.8 ``convert`` 146 ms a file, :func:`parse_pptx` 38 ms, with the same words.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from quarry.core.errors import ParseError
from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers import one_line


class _Builder:
    """Blocks joined by blank lines, with headings and page starts at exact offsets."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.headings: list[Heading] = []
        self.pages: list[int] = []

    def _sep(self) -> None:
        if self.parts:
            self.parts.append("\n\n")
            self.length += 2

    def page(self) -> None:
        self._sep()
        self.pages.append(self.length)
        self.parts.append("")

    def heading(self, level: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            return
        if self.parts and self.parts[-1] == "":  # a page just opened: its heading starts it
            self.headings.append(Heading(level, title, self.length))
            self.parts.append(title)
            self.length += len(title)
            return
        self._sep()
        self.headings.append(Heading(level, title, self.length))
        self.parts.append(title)
        self.length += len(title)

    def block(self, text: str) -> None:
        text = text.strip()
        if not text:
            return
        if not (self.parts and self.parts[-1] == ""):
            self._sep()
        self.parts.append(text)
        self.length += len(text)

    def doc(self, title: str | None = None, metadata: dict | None = None, paged: bool = False) -> ParsedDocument:
        return ParsedDocument(
            text="".join(self.parts),
            title=title or None,
            headings=self.headings,
            page_offsets=self.pages if paged else [],
            metadata=metadata or {},
        )


def parse_pptx(data: bytes, kind: str = "pptx") -> ParsedDocument:
    """One section per slide (its title, or "Slide N"), page = slide number; tables and notes kept."""
    from pptx import Presentation

    try:
        deck = Presentation(io.BytesIO(data))
        slides = list(deck.slides)
    except Exception as exc:
        raise ParseError(f"corrupt PPTX: {one_line(exc)}") from exc
    out = _Builder()
    for number, slide in enumerate(slides, 1):
        out.page()
        title_shape = slide.shapes.title
        title = title_shape.text_frame.text.strip() if title_shape is not None and title_shape.has_text_frame else ""
        out.heading(1, f"Slide {number}: {title}" if title else f"Slide {number}")
        for shape in _shapes(slide.shapes):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            out.block(_shape_text(shape))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                out.block("Notes: " + notes.text.strip())
    props = deck.core_properties
    metadata = {k: " ".join(v.split()) for k, v in (("author", props.author), ("subject", props.subject)) if v}
    return out.doc(props.title, metadata, paged=True)


def _shapes(shapes) -> Iterator:
    """Shapes in reading order (top to bottom, left to right), group shapes opened."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    def key(s):
        return ((s.top or 0), (s.left or 0))

    for shape in sorted(shapes, key=key):
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _shape_text(shape) -> str:
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = (" | ".join(" ".join(c.text.split()) for c in row.cells) for row in shape.table.rows)
        return "\n".join(r for r in rows if r.strip(" |"))
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        return "\n".join(p.text for p in shape.text_frame.paragraphs if p.text.strip())
    return ""


def parse_odt(data: bytes, kind: str = "odt") -> ParsedDocument:
    """ODT paragraphs, lists and tables in body order; ``text:h`` outline levels as headings."""
    from odf import office, opendocument, teletype

    try:
        doc = opendocument.load(io.BytesIO(data))
        body = doc.body.getElementsByType(office.Text)[0]
    except Exception as exc:
        raise ParseError(f"corrupt ODT: {one_line(exc)}") from exc
    out = _Builder()
    stack = list(reversed(body.childNodes))
    while stack:
        node = stack.pop()
        name = getattr(node, "qname", (None, None))[1]
        if name == "h":
            level = node.attributes.get((node.qname[0], "outline-level"), "1")
            out.heading(int(level) if str(level).isdigit() else 1, teletype.extractText(node))
        elif name == "p":
            out.block(teletype.extractText(node))
        elif name == "table":
            rows = []
            for row in _descendants(node, "table-row"):
                cells = [
                    " ".join(teletype.extractText(c).split())
                    for c in row.childNodes
                    if getattr(c, "qname", (None, None))[1] == "table-cell"
                ]
                if any(cells):
                    rows.append(" | ".join(c for c in cells if c))
            out.block("\n".join(rows))
        elif name in ("list", "list-item", "section", "list-header", "index-body", "table-of-content"):
            stack.extend(reversed(node.childNodes))
    title = None
    try:
        from odf import dc

        titles = doc.meta.getElementsByType(dc.Title)
        title = teletype.extractText(titles[0]).strip() if titles else None
    except Exception:  # noqa: BLE001, S110 - a damaged meta.xml costs the title only: the first heading stands in
        pass
    if not title and out.headings:
        title = out.headings[0].title
    return out.doc(title)


def _descendants(node, name: str) -> Iterator:
    stack = list(node.childNodes)
    while stack:
        child = stack.pop(0)
        if getattr(child, "qname", (None, None))[1] == name:
            yield child
        elif hasattr(child, "childNodes"):
            stack[:0] = list(child.childNodes)


def parse_rtf(data: bytes, kind: str = "rtf") -> ParsedDocument:
    """RTF body text (striprtf). RTF has no heading markup to keep; paragraphs are kept."""
    from striprtf.striprtf import rtf_to_text

    if not data.lstrip().startswith(b"{\\rtf"):
        raise ParseError("corrupt RTF: no {\\rtf header")
    text = rtf_to_text(data.decode("latin-1"), errors="ignore")
    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return ParsedDocument(text=text.strip())


def parse_epub(data: bytes, kind: str = "epub") -> ParsedDocument:
    """EPUB chapters in spine order, each read by the HTML parser; the table of contents names
    a chapter whose HTML has no heading of its own."""
    import warnings

    from ebooklib import ITEM_DOCUMENT, epub

    from quarry.ingest.parsers.html import parse_html

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ebooklib warns about its own future defaults
            book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": False})
    except Exception as exc:
        raise ParseError(f"corrupt EPUB: {one_line(exc)}") from exc
    toc = _toc_titles(book.toc)
    out = _Builder()
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ITEM_DOCUMENT:
            continue
        chapter = parse_html(item.get_content())
        if not chapter.text.strip():
            continue
        name = toc.get(item.get_name().split("#")[0])
        if name and not any(h.offset == 0 for h in chapter.headings):
            out.heading(1, name)
        out._sep()
        base = out.length
        out.headings.extend(Heading(h.level, h.title, base + h.offset) for h in chapter.headings)
        out.parts.append(chapter.text)
        out.length += len(chapter.text)
    titles = book.get_metadata("DC", "title")
    creators = book.get_metadata("DC", "creator")
    metadata = {"author": creators[0][0]} if creators and creators[0][0] else {}
    return out.doc(titles[0][0] if titles else None, metadata)


def _toc_titles(toc) -> dict[str, str]:
    """Chapter file name -> its title in the table of contents (first mention wins)."""
    out: dict[str, str] = {}
    stack = list(toc)[::-1]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):  # (Section, [children])
            section, children = node
            stack.extend(list(children)[::-1])
            node = section
        href, title = getattr(node, "href", None), getattr(node, "title", None)
        if href and title:
            out.setdefault(href.split("#")[0], title)
    return out
