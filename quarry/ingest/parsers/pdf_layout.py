"""What a reader of a PDF page sees first, read with pypdfium2: each line's font size, weight and
place on the page, from which come headings (when the PDF has no outline), each page's running
title (the statement or section name at its top) and the clean titles of tables.

pypdf stays the text of record (:mod:`quarry.ingest.parsers.pdf`); this module only reads layout,
line by line: the page's characters in one call, then per line the size of a few characters, the
font of its first and last and the position of its first. pypdfium2 is already quarry's PDF
renderer for OCR; reading layout with it adds about 0.01 s a page to pypdf's 0.05–0.25
(``python bench/pdf_layout.py``, docs/benchmarks.md). pdfplumber was not measured: it would add
a dependency (pdfminer.six) for facts pdfium already gives.

PDFium is not thread-safe (pypdfium2 says so: callers serialise access), and files parse in the
calling thread when a run has one parse worker or a batch one heavy file: two batches' threads
reading two PDFs at once crashed the process (a segfault in libpdfium). Every pdfium call in
this process goes through :data:`PDFIUM` (OCR's rendering too).
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections import Counter
from dataclasses import dataclass

__all__ = [
    "PDFIUM",
    "Line",
    "read_lines",
    "body_size",
    "font_headings",
    "page_titles",
    "locate",
    "edge_key",
    "running_keys",
    "PERIOD_CAPTION",
]

PDFIUM = threading.RLock()  # held around every use of pypdfium2 in this process
MAX_HEADING_CHARS = 120
MAX_HEADING_WORDS = 16
TOP_SHARE = 0.3  # a page title sits in the top share of the page
BOLD_PER_PAGE = 6  # more bold body-size lines than this on a page are a table's, not headings
_NUMBERED = re.compile(r"^(\d+(\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+\S")  # "3.1 Overview", "B. Terms"
# "Item 1B. Unresolved Staff Comments." is a heading though it ends with a period
_SECTION_LEAD = re.compile(r"^(item|part|note|section|chapter|article)\s+[\dIVX]+[A-Z]?\b", re.I)
_BOLD_NAME = re.compile(r"bold|black|heavy|semibold|demi", re.I)
_VALUE = re.compile(r"^(\$|\(?\$?\s?[-–—]?\d[\d,]*(\.\d+)?\)?%?|[-–—]+|\$?\s?\(?[-–—]\)?)$")
_YEARS_END = re.compile(r"(?:^|\s)(19|20)\d\d(\s+(19|20)\d\d)+$")  # a line ending with column years
_SMALL_WORDS = frozenset("a an and as at by for from in into of on or per the to with vs".split())
# a table's period caption or units: "Years ended December 31", "As of June 30, 2023", "(Millions)"
PERIOD_CAPTION = re.compile(
    r"^(\(.*\)|((fiscal\s+)?years?|three|six|nine|twelve|quarters?|months?|weeks?)\b.*\b"
    r"(ended|ending)\b.*|(as\s+(of|at)|at)\s+\w+.*\d{4}.*|.*\b(19|20)\d\d\b.*\b(19|20)\d\d\b.*)$",
    re.I,
)


@dataclass(frozen=True)
class Line:
    """One line of a page as laid out: its text, font size (points), whether its font is bold,
    and its top's distance from the page's top as a share of the page height (0 = top)."""

    text: str
    size: float
    bold: bool
    top: float


def read_lines(data: bytes, password: str | None = None) -> list[list[Line]] | None:
    """Every page's lines in reading order, or None when pdfium cannot open the file (the text
    from pypdf is kept; only layout is lost)."""
    try:
        import pypdfium2 as pdfium
        import pypdfium2.raw as raw
    except ImportError:
        return None
    with PDFIUM:
        try:
            pdf = pdfium.PdfDocument(data, password=password)
        except Exception:  # noqa: BLE001 - pdfium refusing a file pypdf read: no layout, the text layer stands
            return None
        out: list[list[Line]] = []
        try:
            for index in range(len(pdf)):
                try:
                    out.append(_page_lines(pdf[index], raw))
                except Exception:  # noqa: BLE001 - one damaged page costs its own layout only
                    out.append([])
        finally:
            pdf.close()
    return out


def _page_lines(page, raw) -> list[Line]:
    textpage = page.get_textpage()
    handle = textpage.raw
    n = raw.FPDFText_CountChars(handle)
    # one character per index (get_text_range may drop one and shift every index after it)
    text = "".join(_char(raw.FPDFText_GetUnicode(handle, i)) for i in range(max(0, n)))
    matrix = raw.FS_MATRIX()
    height = page.get_height() or 1.0
    name = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    lines: list[Line] = []
    for m in re.finditer(r"[^\r\n]+", text):
        a, b = m.span()
        stripped = m.group().strip()
        if not stripped:
            continue
        first = a + (len(m.group()) - len(m.group().lstrip()))
        sample = [i for i in range(first, b, max(1, (b - first) // 5)) if not text[i].isspace()][:5]
        sizes = sorted(_size(raw, handle, i, matrix) for i in sample)
        last = a + len(m.group().rstrip()) - 1
        bold = all(
            _bold(raw, handle, i, name, flags) for i in {first, last}
        )  # a run-in bold heading is not a bold line
        size = round(sizes[len(sizes) // 2], 1) if sizes else 0.0
        raw.FPDFText_GetCharBox(handle, first, left, right, bottom, top)
        place = max(0.0, min(1.0, (height - top.value) / height))
        lines.append(Line(" ".join(stripped.split()), size, bold, place))
    textpage.close()
    return lines


def _char(code: int) -> str:
    return chr(code) if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000 else " "


def _size(raw, handle, index: int, matrix) -> float:
    """The size a character is drawn at: its font size scaled by its text matrix (many PDFs set
    a font at size 1 and scale it there)."""
    raw.FPDFText_GetMatrix(handle, index, ctypes.byref(matrix))
    scale = abs(matrix.a * matrix.d - matrix.b * matrix.c) ** 0.5 or 1.0
    return raw.FPDFText_GetFontSize(handle, index) * scale


def _bold(raw, handle, index: int, name, flags) -> bool:
    raw.FPDFText_GetFontInfo(handle, index, name, 128, ctypes.byref(flags))
    return bool(_BOLD_NAME.search(name.value.decode("latin-1"))) or raw.FPDFText_GetFontWeight(handle, index) >= 600


def body_size(pages: list[list[Line]]) -> float:
    """The font size most of the text is set in (by characters)."""
    sizes: Counter[float] = Counter()
    for lines in pages:
        for line in lines:
            sizes[line.size] += len(line.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def edge_key(line: str) -> str:
    """A line as a running header repeats: case, spacing and numbers ignored."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def _is_row(text: str) -> bool:
    """A table row: a label followed by at least one value, or values alone."""
    words = text.split()
    return (
        bool(words)
        and _VALUE.match(words[-1]) is not None
        and (len(words) == 1 or _VALUE.match(words[-2]) is not None or any(ch.isdigit() for ch in words[-1]))
    )


def _title_like(text: str) -> bool:
    """Short, worded, not a sentence, not a table row."""
    words = text.split()
    if not words or len(text) > MAX_HEADING_CHARS or len(words) > MAX_HEADING_WORDS:
        return False
    if text.endswith((",", ";")) or (text.endswith(".") and len(words) > 3 and not _SECTION_LEAD.match(text)):
        return False  # a sentence, or a line of one
    if text[0].islower() and (text.endswith((".", ":")) or words[-1] in ("and", "or")):
        return False  # the end of a sentence broken over lines ("the Company.", "benefits; and")
    if _closes_unopened(text):
        return False  # a line cut out of a parenthesis or a quotation ("Buffalo”).")
    letters = [ch for ch in text if ch.isalpha()]
    return len(letters) >= 3 and not _is_row(text)


_PAIRS = {")": "(", "]": "[", "”": "“"}
_LIST_MARK = re.compile(r"^\(?\w{1,3}[.)]\s")  # "a) ", "iv) ", "(2) ": a list item's mark, not a bracket


def _closes_unopened(text: str) -> bool:
    """Whether ``text`` closes a bracket or a curly double quote it never opened (after a list
    item's mark such as ``b)``)."""
    depth = dict.fromkeys(_PAIRS.values(), 0)
    for ch in _LIST_MARK.sub("", text, count=1):
        if ch in depth:
            depth[ch] += 1
        elif ch in _PAIRS:
            if depth[_PAIRS[ch]] == 0:
                return True
            depth[_PAIRS[ch]] -= 1
    return False


def _capitalised(text: str) -> bool:
    """ALL CAPS, or Title Case (small words aside)."""
    words = list(re.findall(r"[A-Za-z][A-Za-z'’\-]*", text))
    if not words:
        return False
    if all(w.isupper() for w in words if len(w) > 1):
        return True
    big = [w for w in words if w.lower() not in _SMALL_WORDS]
    return bool(big) and all(w[0].isupper() for w in big)


def running_keys(pages: list[list[Line]], share: float = 0.4, edge: int = 3) -> set[str]:
    """Forms of lines that open or close at least ``share`` of the pages (and three): running
    headers and footers, which are not a page's own title."""
    if sum(1 for p in pages if p) < 4:
        return set()
    counts: Counter[str] = Counter()
    for lines in pages:
        counts.update({edge_key(ln.text) for ln in lines[:edge] + lines[-edge:]})
    need = max(3, share * len(pages))
    return {k for k, n in counts.items() if n >= need}


def font_headings(pages: list[list[Line]], body: float | None = None) -> list[tuple[int, int, str]]:
    """``(page index, level, title)`` of lines set as headings: larger than the body text, or bold
    at body size and capitalised, short, not a sentence or a table row, not a running header.
    Larger sizes rank higher (level 1 is the largest); bold body-size lines are the lowest level.
    Nothing when headings would be a third of the lines or more (a slide deck, a form): no
    outline is better than a wrong one."""
    body = body_size(pages) if body is None else body
    if not body:
        return []
    running = running_keys(pages)
    found: list[tuple[int, float, str]] = []
    total = 0
    for p, lines in enumerate(pages):
        total += len(lines)
        page_start = len(found)
        prev_size = None
        last_line = -2  # the line index of this page's latest heading
        for i, line in enumerate(lines):
            text = line.text
            bigger = line.size >= body * 1.15
            if not _title_like(text) or edge_key(text) in running or not text[0].isalnum():
                prev_size = line.size
                continue
            if bigger or (
                line.bold
                and line.size >= body * 0.95
                and _capitalised(text)
                and _stands_alone(lines, i, body)
                and not _column_caption(lines, i)
            ):
                rank = line.size if bigger else body
                if (
                    last_line == i - 1
                    and prev_size == line.size
                    and found[-1][1] == rank
                    and _continues(lines, i)
                    and not _NUMBERED.match(text)
                    and len(found[-1][2]) + len(text) < MAX_HEADING_CHARS
                ):
                    found[-1] = (p, rank, f"{found[-1][2]} {text}")  # a heading set on two lines
                else:
                    found.append((p, rank, text))
                last_line = i
            prev_size = line.size
        if sum(1 for _, rank, _ in found[page_start:] if rank == body) > BOLD_PER_PAGE:
            # many bold lines at body size on one page: a table's cells, not headings
            found[page_start:] = [h for h in found[page_start:] if h[1] != body]
    if not found or len(found) > max(8, total // 3):
        return []
    ranks = sorted({round(r, 0) for _, r, _ in found}, reverse=True)[:4]
    level = {r: i + 1 for i, r in enumerate(ranks)}
    return [(p, level.get(round(r, 0), len(ranks)), t) for p, r, t in found]


def _stands_alone(lines: list[Line], i: int, body: float) -> bool:
    """A bold line is a heading when the next line is not bold too (a bold paragraph or a bold
    table is not a run of headings) or it is larger."""
    nxt = lines[i + 1] if i + 1 < len(lines) else None
    return nxt is None or not nxt.bold or nxt.size > lines[i].size


def _column_caption(lines: list[Line], i: int, ahead: int = 3) -> bool:
    """A bold line of a few words set over a table's column years or its first rows ("Fiscal
    Year" above "In Millions 2019 2018", "Page" above a contents line): a caption, not a
    heading. Looks at the next ``ahead`` lines, up to the first line of prose."""
    if len(lines[i].text.split()) > 3:
        return False
    for nxt in lines[i + 1 : i + 1 + ahead]:
        if _YEARS_END.search(nxt.text) or _is_row(nxt.text):
            return True
        if len(nxt.text.split()) > 6:
            return False  # prose follows: a heading
    return False


def _continues(lines: list[Line], i: int) -> bool:
    """Line ``i`` directly below line ``i - 1`` (a heading broken over two lines)."""
    return i > 0 and 0 <= lines[i].top - lines[i - 1].top <= 0.03


def page_titles(pages: list[list[Line]], body: float | None = None, top_share: float = TOP_SHARE) -> list[str]:
    """Each page's title: the capitalised or emphasised short lines that open the page, before its
    first prose or table line, running headers and footers, dates and period captions left out
    (``3M Company and Subsidiaries — Consolidated Statement of Cash Flows``); "" for a page
    that opens with prose."""
    body = body_size(pages) if body is None else body
    running = running_keys(pages)
    out = []
    for lines in pages:
        parts: list[str] = []
        style = None
        for line in lines:
            text = line.text
            if edge_key(text) in running or re.fullmatch(r"[\d\W]+", text) or text.lower() == "table of contents":
                continue
            if line.top > top_share or not _title_like(text):
                break
            if PERIOD_CAPTION.match(text):
                if parts:
                    break
                continue
            emphasised = line.bold or (body and line.size >= body * 1.15)
            if not (emphasised or (_capitalised(text) and text.upper() == text)):
                break
            if (line.size, line.bold) == style:
                parts[-1] = f"{parts[-1]} {text}"  # one title set on several lines
            elif len(parts) == 2:
                break
            else:
                parts.append(text)
            style = (line.size, line.bold)
        out.append(" — ".join(parts)[: MAX_HEADING_CHARS * 2])
    return out


def locate(text: str, title: str, start: int, end: int) -> int | None:
    """Where ``title`` (as pdfium read it) begins in ``text[start:end]`` (as pypdf read it), any
    whitespace allowed between its characters (pypdf breaks lines inside words), or None."""
    chars = [re.escape(ch) for ch in title if not ch.isspace()]
    if not chars:
        return None
    match = re.compile(r"\s*".join(chars), re.I).search(text, start, end)
    return match.start() if match else None
