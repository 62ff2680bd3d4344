"""Spreadsheets and delimited text: XLSX (openpyxl), XLS (xlrd), ODS (odfpy), CSV/TSV (csv).

Each sheet is a level-1 heading, so a section. Its rows are written as ``a | b | c`` lines in
*row groups* of at most :data:`GROUP_CHARS` characters, separated by blank lines, and every
group starts with the sheet's header row. The chunker cuts at blank lines first and packs
whole groups up to the chunk size (800 by default, above GROUP_CHARS), so every chunk starts
with the header: "Maple Leafs | TOR | 13" is never indexed without "Team | Abbrev | Cups".
Sheets are bounded (:data:`MAX_ROWS` rows, :data:`MAX_CELLS` cells per file); what is cut is
said in the text and counted in ``metadata.rows_dropped``.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
from collections.abc import Iterable, Iterator

from quarry.core.errors import ParseError
from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers import one_line

GROUP_CHARS = 600
HEADER_SCAN = 5  # leading rows searched for the header row
MAX_ROWS = 20_000  # per sheet
MAX_CELLS = 1_000_000  # per file
MAX_CELL_CHARS = 2_000
_DELIMITERS = ",;\t|"


def parse_sheets(data: bytes, kind: str = "csv") -> ParsedDocument:
    """Parse a workbook (xlsx, xls, ods) or delimited text (csv, tsv) into per-sheet sections."""
    readers = {"xlsx": _xlsx, "xls": _xls, "ods": _ods, "csv": _delimited, "tsv": _delimited}
    try:  # rows are streamed, so reading and rendering fail together
        return render_sheets(readers[kind](data, kind), named=kind not in ("csv", "tsv"))
    except ParseError:
        raise
    except Exception as exc:  # zipfile.BadZipFile, xlrd.XLRDError, lxml errors...
        raise ParseError(f"corrupt {kind.upper()}: {one_line(exc)}") from exc


def render_sheets(sheets: Iterable[tuple[str, Iterable[list[str]]]], named: bool = True) -> ParsedDocument:
    """Text, headings and metadata for ``(sheet name, rows)`` pairs (see the module docstring)."""
    parts: list[str] = []
    headings: list[Heading] = []
    length = 0
    cells = dropped = 0

    def add(piece: str) -> None:
        nonlocal length
        if parts:
            parts.append("\n\n")
            length += 2
        parts.append(piece)
        length += len(piece)

    for name, rows in sheets:
        header: str | None = None
        group: list[str] = []
        n_rows = written = 0
        lines: Iterator[tuple[int, str]] = _lines(rows)
        scanned = [next(lines, None) for _ in range(HEADER_SCAN)]
        head = [x for x in scanned if x is not None]
        if head:
            # Title rows ("Stanley Cups" above the table) come before the header: the header is
            # the first of the leading rows with the most filled cells.
            widest = max(n for n, _ in head)
            at = next(i for i, (n, _) in enumerate(head) if n == widest)
            captions, header = [line for _, line in head[:at]], head[at][1]
            if named:
                headings.append(Heading(1, name, length + 2 if parts else 0))
                add(name)
            if captions:
                add("\n".join(captions))
            lines = itertools.chain(head[at + 1 :], lines)
        for n, line in lines:
            if n_rows >= MAX_ROWS or cells >= MAX_CELLS:
                dropped += 1
                continue
            n_rows += 1
            cells += n
            assert header is not None  # a row left: the scan above read one, and took a header
            if group and len(header) + sum(len(x) + 1 for x in group) + len(line) > GROUP_CHARS:
                add("\n".join([header, *group]))
                group, written = [], written + 1
            group.append(line)
        if header is not None and (group or not written):  # a header-only sheet still says its columns
            add("\n".join([header, *group]))
    if dropped:
        add(
            f"[{dropped} more rows not indexed: quarry reads at most {MAX_ROWS} rows a sheet, {MAX_CELLS} cells a file]"
        )
    metadata = {"rows_dropped": str(dropped)} if dropped else {}
    return ParsedDocument(text="".join(parts), headings=headings, metadata=metadata)


def _lines(rows: Iterable[list]) -> Iterator[tuple[int, str]]:
    """(filled cells, ``a | b | c``) for each row that is not empty."""
    for row in rows:
        cells = [_cell(c) for c in row]
        while cells and not cells[-1]:
            cells.pop()
        filled = sum(1 for c in cells if c)
        if filled:
            yield filled, " | ".join(cells)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, dt.datetime):
        value = value.isoformat(sep=" ").removesuffix(" 00:00:00").removesuffix("T00:00:00")
    elif isinstance(value, (dt.date, dt.time)):
        value = value.isoformat()
    text = " ".join(str(value).split())
    return text[:MAX_CELL_CHARS]


def _xlsx(data: bytes, kind: str) -> Iterator[tuple[str, Iterator[list]]]:
    import openpyxl

    # read_only streams rows instead of building every cell object; data_only gives the cached
    # value of a formula, which is what a reader of the sheet sees.
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        for sheet in book.worksheets:
            yield sheet.title, (list(r) for r in sheet.iter_rows(values_only=True))
    finally:
        book.close()


def _xls(data: bytes, kind: str) -> Iterator[tuple[str, Iterator[list]]]:
    import xlrd

    book = xlrd.open_workbook(file_contents=data, on_demand=True)
    for sheet in book.sheets():
        yield sheet.name, (_xls_row(book, sheet, r) for r in range(sheet.nrows))


def _xls_row(book, sheet, r: int) -> list:
    import xlrd

    out = []
    for cell in sheet.row(r):
        if cell.ctype == xlrd.XL_CELL_DATE:
            try:
                out.append(xlrd.xldate.xldate_as_datetime(cell.value, book.datemode))
                continue
            except Exception:  # noqa: BLE001, S110 - a date serial out of xlrd's range keeps its number
                pass
        out.append(cell.value if cell.ctype not in (xlrd.XL_CELL_EMPTY, xlrd.XL_CELL_BLANK) else None)
    return out


def _ods(data: bytes, kind: str) -> Iterator[tuple[str, Iterator[list]]]:
    from odf import opendocument, table
    from odf.namespaces import TABLENS

    doc = opendocument.load(io.BytesIO(data))
    for sheet in doc.spreadsheet.getElementsByType(table.Table):
        yield sheet.getAttribute("name") or "Sheet", _ods_rows(sheet, TABLENS)


def _ods_rows(sheet, ns: str) -> Iterator[list]:
    from odf import table

    for row in sheet.getElementsByType(table.TableRow):
        cells = []
        for cell in row.childNodes:
            if cell.qname[1] not in ("table-cell", "covered-table-cell"):
                continue
            # Trailing empty cells are often "repeated" thousands of times to the sheet's edge.
            repeat = min(int(cell.attributes.get((ns, "number-columns-repeated"), 1) or 1), 100)
            cells.extend([_ods_text(cell)] * repeat)
        repeat = min(int(row.attributes.get((ns, "number-rows-repeated"), 1) or 1), 100)
        for _ in range(repeat if any(cells) else 1):
            yield cells


def _ods_text(cell) -> str:
    from odf import teletype
    from odf.text import P

    return "\n".join(teletype.extractText(p) for p in cell.getElementsByType(P))


def _delimited(data: bytes, kind: str) -> Iterator[tuple[str, Iterator[list]]]:
    from quarry.ingest.parsers.text import decode_bytes

    text = decode_bytes(data)  # BOMs, UTF-16, then charset-normalizer
    sample = text[:20_000]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters="\t" if kind == "tsv" else _DELIMITERS)
    except csv.Error:  # one column, or too irregular to tell: the format's usual delimiter
        dialect = csv.excel_tab if kind == "tsv" else csv.excel
    csv.field_size_limit(10_000_000)
    yield "", csv.reader(io.StringIO(text, newline=""), dialect)
