"""PDF via pypdf: text per page, page offsets, headings from the outline (bookmarks).

Running page headers and footers (a line that opens or closes most pages, page numbers
included) are removed before the text is joined, and table rows that pypdf splits into one line
per cell are put back together, each value labelled with its column's year where the table's
header names years (``Net sales | 2018: 32,765 | 2017: 31,657``), so they neither pad chunks nor match every
query. A filing's type and period ("Form 10-K", "fiscal year 2018") are read from its opening
pages into ``metadata`` (``doc_type``, ``period``) for the contextual header.

Pages whose text layer is empty or garbage are OCRed (:mod:`quarry.ingest.parsers.ocr`) when OCR is
on and the page carries an image; a PDF that still has no text is the failure
"no text layer (N pages)".
"""

from __future__ import annotations

import io
import logging
import re

from quarry.core.errors import ParseError
from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers import one_line

PAGE_SEPARATOR = "\n\n"
EDGE_LINES = 3  # lines at each end of a page that may be a running header or footer
RUNNING_SHARE = 0.4  # ... when their form opens or closes at least this share of the pages
# Extracted text keeps typographic ligatures ("Uniﬁed"), which defeat search for "Unified".
_LIGATURES = str.maketrans(
    {"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl", "\ufb05": "st", "\ufb06": "st"}
)
# Control characters (some fonts map glyphs to NUL) other than tab and newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_JUNK_TITLE = re.compile(
    r"^(untitled.*|no title|title|document\d*|slide \d+|microsoft (word|powerpoint|excel) - .*"
    r"|.*\.(docx?|pdf|rtf|txt|tex|dvi|ps|odt|pages|indd|qxd|pptx?|xlsx?|html?))$",
    re.I,
)


def parse_pdf(data: bytes, kind: str = "pdf", ocr: bool = True) -> ParsedDocument:
    """Parse PDF bytes: pages joined by a blank line, ``page_offsets`` at each page's start.

    With ``ocr``, pages without a usable text layer are read by OCR. Raises ParseError for
    encrypted PDFs that need a password, for unreadable files and for PDFs with no text.
    """
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            _decrypt(reader)
        page_objects = list(reader.pages)
    except ParseError:
        raise
    except Exception as exc:  # pypdf signals damage with many exception types
        raise ParseError(f"not valid PDF: {one_line(exc)}") from exc
    if not page_objects:
        raise ParseError("not valid PDF: no pages")
    pages, errors = [], []
    for i, page in enumerate(page_objects):
        # One damaged page costs its own text, not the document's.
        try:
            pages.append(_page_text(page))
        except Exception as exc:
            pages.append("")
            errors.append((i, exc))
    if len(errors) == len(pages):
        raise ParseError(f"not valid PDF: {one_line(errors[0][1])}")
    stats = _ocr_pages(data, pages) if ocr else None
    recovered = set(stats.numbers) if stats is not None else set()
    warnings = [f"page {i + 1} could not be read: {one_line(exc)}" for i, exc in errors if i + 1 not in recovered]
    if stats is not None:
        warnings += stats.warnings
    pages = [table_rows(p) for p in strip_running_lines(pages)]

    joined = ParsedDocument.from_pages(pages, PAGE_SEPARATOR)
    text, offsets = joined.text, joined.page_offsets
    if not text.strip():
        # A scanned PDF that OCR could not read (or OCR is off): named, not silently empty.
        return no_text_layer(data, len(pages))

    headings = _outline_headings(reader, text, offsets)
    info = _metadata(reader)
    return ParsedDocument(
        text=text,
        title=_clean_title(info.pop("title", "")),
        headings=headings,
        page_offsets=offsets,
        metadata=info,
        ocr_pages=stats.pages if stats else 0,
        ocr_seconds=stats.seconds if stats else 0.0,
        ocr_page_numbers=stats.numbers if stats else [],
        warnings=warnings,
    )


def _edge_key(line: str) -> str:
    """A line as a running header or footer repeats: case, spacing and numbers (page numbers,
    dates) ignored."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def strip_running_lines(pages: list[str], edge: int = EDGE_LINES, share: float = RUNNING_SHARE) -> list[str]:
    """Remove running headers and footers: lines among the first or last ``edge`` lines of a page
    whose form (:func:`_edge_key`) opens or closes at least ``share`` of the pages (and at least
    three). Only lines at the page's edges go; the same words inside a page stay."""
    texts = [p.splitlines() for p in pages]
    if sum(1 for lines in texts if lines) < 4:
        return pages
    need = max(3, share * len(pages))
    top: dict[str, int] = {}
    bottom: dict[str, int] = {}
    for lines in texts:
        body = [ln for ln in lines if ln.strip()]
        for key in {_edge_key(ln) for ln in body[:edge]}:
            top[key] = top.get(key, 0) + 1
        for key in {_edge_key(ln) for ln in body[-edge:]}:
            bottom[key] = bottom.get(key, 0) + 1
    heads = {k for k, n in top.items() if n >= need and k}
    foots = {k for k, n in bottom.items() if n >= need and k}
    if not heads and not foots:
        return pages
    out = []
    for lines in texts:
        first, last = 0, len(lines)
        for _ in range(edge):  # header lines, blank lines between them skipped
            while first < last and not lines[first].strip():
                first += 1
            if first < last and _edge_key(lines[first]) in heads:
                first += 1
            else:
                break
        for _ in range(edge):
            while last > first and not lines[last - 1].strip():
                last -= 1
            if last > first and _edge_key(lines[last - 1]) in foots:
                last -= 1
            else:
                break
        out.append("\n".join(lines[first:last]).strip())
    return out


_VALUE = re.compile(r"^(\$|\(?\$?\s?[-–—]?\d[\d,]*(\.\d+)?\)?%?|[-–—]+|\$?\s?\(?[-–—]\)?)$")
_YEAR = re.compile(r"^(19|20)\d\d$")


def table_rows(page: str) -> str:
    """Join a table row's cells, which pypdf puts one per line, back onto its label's line.

    A line holding only a value (a number, a bracketed negative, a percentage, a dash, a lone
    ``$``) belongs to the row above it; consecutive lines that are only years are the table's
    column header, and a row with exactly one value per year gets each value labelled with it.
    Prose is left as it is.
    """
    lines = page.split("\n")
    out: list[str] = []
    row: list[str] | None = None  # the label, then its values
    years: list[str] = []
    pending_years: list[str] = []

    def flush():
        nonlocal row
        if row is not None:
            label, values = row[0], row[1:]
            if values and years and len(values) == len(years):
                out.append(" | ".join([label] + [f"{y}: {v}" for y, v in zip(years, values)]))
            elif values:
                out.append(" | ".join(row))
            else:
                out.append(label)
        row = None

    dollar = blank = False
    for raw in lines:
        cell = raw.strip()
        if not cell:
            blank = True  # a paragraph break in prose, or the space between two cells
            continue
        if _YEAR.match(cell):
            pending_years.append(cell)
            continue
        if pending_years:
            blank = False
            if len(pending_years) >= 2:
                flush()
                years = pending_years
                out.append(" | ".join(years))
            elif row is not None:
                row.append(pending_years[0])
            else:
                out.append(pending_years[0])
            pending_years = []
        if _VALUE.match(cell) and row is not None:
            if cell == "$":
                dollar = True
                continue
            row.append(("$" + cell) if dollar else cell)
            dollar = blank = False
            continue
        flush()
        if blank and out and out[-1]:
            out.append("")
        dollar = blank = False
        row = [" ".join(cell.split())]
    if pending_years:
        if len(pending_years) >= 2:
            flush()
            out.append(" | ".join(pending_years))
        elif row is not None:
            row.append(pending_years[0])
        else:
            out.append(pending_years[0])
    flush()
    return "\n".join(out)


def no_text_layer(data: bytes, n_pages: int) -> ParsedDocument:
    """What a PDF whose pages carry no text (scans, image-only pages) becomes.

    Reached when OCR is off, unavailable or read nothing: a named failure, so that a run reports
    the file instead of dropping it silently as empty.
    """
    raise ParseError(f"no text layer ({n_pages} page{'s' if n_pages != 1 else ''}): scanned or image-only PDF, "
                     "and OCR read no text from it (or is off)")


def _ocr_pages(data: bytes, pages: list[str]):
    """Replace, in place, the text of pages whose layer is empty or garbage by their OCR text."""
    from quarry.ingest.parsers.ocr import OcrStats, engine_name, is_garbage, ocr_pdf_pages

    stats = OcrStats()
    todo = [i for i, text in enumerate(pages) if is_garbage(text)]
    if not todo:
        return stats
    if not engine_name():
        stats.warnings.append(f"{len(todo)} page(s) without a usable text layer not read: no OCR engine installed")
        return stats
    try:
        found = ocr_pdf_pages(data, todo, stats)
    except Exception as exc:  # pdfium refusing a file pypdf could read costs OCR only, not the text layer
        logging.getLogger(__name__).warning("OCR skipped: %s", one_line(exc))
        stats.warnings.append(f"OCR skipped: {one_line(exc)}")
        return stats
    for i, text in found.items():
        if text.strip():
            pages[i] = _CONTROL.sub("", text).strip()
            stats.numbers.append(i + 1)
    return stats


def _decrypt(reader) -> None:
    # Many "protected" PDFs only restrict printing or copying and open with an empty password.
    try:
        opened = reader.decrypt("")
    except Exception as exc:  # pypdf raises DependencyError, NotImplementedError, PdfReadError...
        raise ParseError(f"encrypted PDF (cannot decrypt: {one_line(exc)})") from exc
    if not opened:
        raise ParseError("encrypted PDF (password required)")


def _page_text(page) -> str:
    text = page.extract_text() or ""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_LIGATURES)
    return _CONTROL.sub("", text).strip()


def _outline_headings(reader, text: str, offsets: list[int]) -> list[Heading]:
    """Headings from the bookmarks, placed at the title's text on its page, else the page start."""
    try:
        outline = reader.outline
    except Exception:  # a broken outline should not cost the document its text
        return []
    headings: list[Heading] = []
    items = _in_order(outline)
    for item, level in items:
        title = " ".join(str(getattr(item, "title", "") or "").split())
        try:
            page = reader.get_destination_page_number(item)
        except Exception:
            continue
        if not title or page is None or not 0 <= page < len(offsets):
            continue
        start = offsets[page]
        end = offsets[page + 1] if page + 1 < len(offsets) else len(text)
        headings.append(Heading(level, title, _find_title(text, title, start, end)))
    headings.sort(key=lambda h: h.offset)  # bookmarks need not follow page order
    return headings


def _in_order(outline) -> list[tuple[object, int]]:
    """Outline items with their level (1 = top), in document order; nested lists are children."""
    out: list[tuple[object, int]] = []
    stack = [(iter(outline), 1)]
    while stack:
        nodes, level = stack[-1]
        node = next(nodes, None)
        if node is None:
            stack.pop()
        elif isinstance(node, list):
            stack.append((iter(node), level + 1))
        else:
            out.append((node, level))
    return out


def _find_title(text: str, title: str, start: int, end: int) -> int:
    words = [re.escape(w) for w in title.translate(_LIGATURES).split()]
    # Extraction may break a title across lines or glue words together, so any whitespace
    # (or none) may separate the words.
    match = re.compile(r"\s*".join(words), re.I).search(text, start, end) if words else None
    return match.start() if match else start


def _metadata(reader) -> dict[str, str]:
    try:
        info = reader.metadata or {}
    except Exception:
        return {}
    out = {}
    for key in ("title", "author", "subject", "keywords"):
        value = info.get(f"/{key.capitalize()}")
        value = " ".join(str(value).split()) if value is not None else ""
        if value:
            out[key] = value
    return out


def _clean_title(title: str) -> str | None:
    """The metadata title, or None when it is empty or boilerplate such as a file name."""
    title = title.strip()
    if not title or _JUNK_TITLE.match(title) or not any(ch.isalpha() for ch in title):
        return None
    return title

