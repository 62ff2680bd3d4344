"""PDF via pypdf: text per page, page offsets, headings from the outline (bookmarks), else from
the layout (font sizes and weights, read by pypdfium2: :mod:`quarry.ingest.parsers.pdf_layout`),
each page's running title and the tables found in the text.

Running page headers and footers (a line that opens or closes most pages, page numbers
included) are removed before the text is joined, and table rows that pypdf splits into one line
per cell are put back together, each value labelled with its column's year where the table's
header names years (``Net sales | 2018: 32,765 | 2017: 31,657``), so they neither pad chunks nor match every
query. A run of such rows is a table (:class:`~quarry.core.models.Table`): its title is the line
above its column headers, its columns those headers (``Years ended December 31: 2018 | 2017``),
and every chunk cut from it carries both in its header. A filing's type and period ("Form 10-K", "fiscal year 2018") are read from its opening
pages into ``metadata`` (``doc_type``, ``period``) for the contextual header.

Pages whose text layer is empty or garbage are OCRed (:mod:`quarry.ingest.parsers.ocr`) when OCR is
on and the page carries an image; a PDF that still has no text is the failure
"no text layer (N pages)".

pypdf's text extraction is most of a parse (0.01-0.1 s a page). A PDF of :data:`SPLIT_MIN_PAGES`
pages or more, parsed with ``page_workers`` above one (quarry's parse pool gives a lone file its
spare cores: :func:`split_pages`), has its pages' text read by this process and spawned helpers,
each with a reader of its own, each taking the next unread page; everything after extraction runs
here, so the document is the one a serial parse gives.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from quarry.core.errors import ParseError
from quarry.core.models import Heading, ParsedDocument, Table
from quarry.ingest.parsers import one_line
from quarry.ingest.parsers.pdf_layout import PERIOD_CAPTION, body_size, font_headings, locate, page_titles, read_lines

PAGE_SEPARATOR = "\n\n"
MIN_OUTLINE = 2  # an outline of fewer entries (a title bookmark alone) gives way to the layout's headings
EDGE_LINES = 3  # lines at each end of a page that may be a running header or footer
RUNNING_SHARE = 0.4  # ... when their form opens or closes at least this share of the pages
# A PDF this long has its pages' text read by several processes when it may (page_workers > 1). A
# helper takes 0.3-0.5 s to start (Python, pypdf, the parse pool's budget): a split pays off from a
# few pages of a dense filing (0.1 s a page) and from about 40 pages of a light manual (0.015 s a
# page), and costs at most 5% below that, since this process reads whatever pages the helpers have
# not reached yet (docs/benchmarks.md, "One long PDF alone").
SPLIT_MIN_PAGES = 24
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


log = logging.getLogger(__name__)
# How many processes a parse may read a long PDF's page text in, and how each helper runs its part
# (split_pages); (1, None) outside a split_pages block.
_SPLIT: ContextVar[tuple[int, Callable[..., Any] | None]] = ContextVar("quarry_pdf_split", default=(1, None))


@contextmanager
def split_pages(workers: int, run: Callable[..., Any] | None = None) -> Iterator[None]:
    """Let the :func:`parse_pdf` calls inside the block read a long PDF's page text in ``workers``
    processes (``page_workers``), as the parsers' shared entry points (``parse_data``) pass no such
    option. A helper runs its part as ``run(fn, *args)`` when ``run`` is given: a picklable callable,
    which quarry's parse pool uses to hold each helper to the file's CPU budget."""
    token = _SPLIT.set((max(1, workers), run))
    try:
        yield
    finally:
        _SPLIT.reset(token)


def parse_pdf(data: bytes, kind: str = "pdf", ocr: bool = True, page_workers: int | None = None) -> ParsedDocument:
    """Parse PDF bytes: pages joined by a blank line, ``page_offsets`` at each page's start.

    With ``ocr``, pages without a usable text layer are read by OCR. Raises ParseError for
    encrypted PDFs that need a password, for unreadable files and for PDFs with no text.
    ``page_workers`` (default: what :func:`split_pages` set, else 1): processes that read the page
    text of a PDF of :data:`SPLIT_MIN_PAGES` pages or more, this one included; the result is the
    serial parse's.
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
    workers, run = _SPLIT.get()
    workers = workers if page_workers is None else page_workers
    early: tuple | None = None  # the layout, when read while helpers start
    if workers > 1 and len(page_objects) >= SPLIT_MIN_PAGES:
        pages, errors, early = _split_texts(data, page_objects, workers, run)
    else:
        pages, errors = _texts(page_objects)
    if len(errors) == len(pages):
        raise ParseError(f"not valid PDF: {errors[0][1]}")
    stats = _ocr_pages(data, pages) if ocr else None
    recovered = set(stats.numbers) if stats is not None else set()
    warnings = [f"page {i + 1} could not be read: {reason}" for i, reason in errors if i + 1 not in recovered]
    if stats is not None:
        warnings += stats.warnings
    pages = [table_rows(p) for p in strip_running_lines(pages)]

    joined = ParsedDocument.from_pages(pages, PAGE_SEPARATOR)
    text, offsets = joined.text, joined.page_offsets
    if not text.strip():
        # A scanned PDF that OCR could not read (or OCR is off): named, not silently empty.
        return no_text_layer(data, len(pages))

    layout = early[0] if early is not None else read_lines(data)
    if layout is not None and len(layout) != len(pages):
        layout = None  # pdfium and pypdf disagree on the pages: the layout cannot be placed
    body = body_size(layout) if layout else 0.0
    headings = _outline_headings(reader, text, offsets)
    if len(headings) < MIN_OUTLINE and layout:
        headings = _placed(font_headings(layout, body), text, offsets) or headings
    titles = page_titles(layout, body) if layout else []
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
        page_titles=titles if any(titles) else [],
        tables=_tables(pages, offsets, layout, titles),
    )


def _texts(page_objects, first: int = 0) -> tuple[list[str], list[tuple[int, str]]]:
    """Each page's text, and ``(page index, reason)`` for the pages that could not be read (their
    text ""); ``first``: the index of ``page_objects[0]`` in the document."""
    texts: list[str] = []
    errors: list[tuple[int, str]] = []
    for i, page in enumerate(page_objects, first):
        try:
            texts.append(_page_text(page))
        except Exception as exc:  # noqa: BLE001 - one damaged page costs its own text, not the document's
            texts.append("")
            errors.append((i, one_line(exc)))
    return texts, errors


_COUNTER: Any = None  # in a helper process: the shared count of pages claimed (_claim)


def _share_counter(counter) -> None:
    """A helper process's initializer: the parse's page counter, shared by inheritance."""
    global _COUNTER
    _COUNTER = counter


def _claim(counter, n: int) -> Iterator[int]:
    """The next page no process has claimed yet, until all ``n`` are."""
    while True:
        with counter.get_lock():
            i = counter.value
            counter.value = i + 1
        if i >= n:
            return
        yield i


def _helper_texts(data: bytes, n: int) -> tuple[dict[int, str], list[tuple[int, str]]]:
    """In a helper process: the text of the pages it claims, read from the PDF's bytes with a
    reader of its own (opened and decrypted as :func:`parse_pdf` does), as :func:`_texts` reads them."""
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # as in the parse pool's worker: repairs are not news
    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        _decrypt(reader)
    texts: dict[int, str] = {}
    errors: list[tuple[int, str]] = []
    for i in _claim(_COUNTER, n):
        (texts[i],), found = _texts([reader.pages[i]], i)
        errors += found
    return texts, errors


def _split_texts(
    data: bytes, page_objects: list, workers: int, run: Callable[..., Any] | None
) -> tuple[list[str], list[tuple[int, str]], tuple | None]:
    """:func:`_texts` of every page, read by this process and ``workers - 1`` spawned helpers, each
    helper's part run as ``run(_helper_texts, ...)`` when ``run`` is given. Each process claims the
    next unread page from a shared counter, so a helper that starts late or pages that differ in
    weight leave no process idle; a page whose helper could not start or failed is read here, and
    a helper that read no page is not waited for. A helper's ``BaseException`` (``run``'s budget
    exceeded) ends the parse; helpers are stopped on every way out, the budget's exception raised
    here included.

    Also returns ``(read_lines(data),)``: the layout, read here first, while the helpers start (None
    when no counter could be shared: then every page is read here)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    n = len(page_objects)
    ctx = multiprocessing.get_context("spawn")
    try:
        counter = ctx.Value("i", 0)
    except Exception as exc:  # noqa: BLE001 - no shared semaphores here (some sandboxes): one process reads them
        log.debug("pages read in one process, no counter to share: %s", one_line(exc))
        return (*_texts(page_objects), None)
    pool: ProcessPoolExecutor | None = None
    futures: list[Future] = []
    finished = False
    try:
        try:
            pool = ProcessPoolExecutor(workers - 1, ctx, initializer=_share_counter, initargs=(counter,))
            for _ in range(workers - 1):
                futures.append(pool.submit(run, _helper_texts, data, n) if run else pool.submit(_helper_texts, data, n))
        except Exception as exc:  # noqa: BLE001 - no process to start (limits, a daemonic parent): read here
            log.debug("%d page helpers of %d not started: %s", workers - 1 - len(futures), workers - 1, one_line(exc))
        layout = (read_lines(data),)
        texts: list[str | None] = [None] * n
        errors: list[tuple[int, str]] = []
        for i in _claim(counter, n):
            (texts[i],), found = _texts([page_objects[i]], i)
            errors += found
        here = n - texts.count(None)
        unread = n - here
        pending = set(futures)
        # helpers still at work hold the unread pages; one still starting, or done, holds none
        while pending and unread:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    part, found = future.result()
                except Exception as exc:  # noqa: BLE001 - the helper died or failed: its pages are read below
                    log.debug("a page helper failed: %s", one_line(exc))
                    continue
                for i, text in part.items():
                    texts[i] = text
                errors += found
                unread -= len(part)
        lost = [i for i, text in enumerate(texts) if text is None]
        for i in lost:
            (texts[i],), found = _texts([page_objects[i]], i)
            errors += found
        helped = n - here - len(lost)
        log.debug(
            "%d pages read in %d processes: %d here, %d by helpers, %d read here again (their helper failed)",
            n,
            workers,
            here,
            helped,
            len(lost),
        )
        finished = not pending
        return [t or "" for t in texts], sorted(errors), layout
    finally:
        if pool is not None:
            if not finished:  # over budget, an error, or not needed: a helper still running stops now
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    proc.kill()
            pool.shutdown(wait=finished, cancel_futures=True)


def _placed(found: list[tuple[int, int, str]], text: str, offsets: list[int]) -> list[Heading]:
    """Headings read from the layout, placed where pypdf's text of their page holds them; one
    that cannot be found there is left out (a heading at the wrong place is worse than none)."""
    out: list[Heading] = []
    cursor = 0
    for page, level, title in found:
        start = max(offsets[page], cursor)
        end = offsets[page + 1] if page + 1 < len(offsets) else len(text)
        at = locate(text, title, start, end)
        if at is not None:
            out.append(Heading(level, title, at))
            cursor = at + 1
    return out


def _tables(pages: list[str], offsets: list[int], layout, titles: list[str]) -> list[Table]:
    """The tables of every page, at document offsets; a title pypdf broke inside a word
    ("Cash Flow\\n s") is taken as the layout's line, and a table with no title of its own takes
    its page's title, else that of the table it continues from the page before."""
    out: list[Table] = []
    for p, page in enumerate(pages):
        lines = layout[p] if layout else []
        for start, end, title, columns in find_tables(page):
            title = _as_laid_out(title, lines)
            if not title:
                title = titles[p] if p < len(titles) and titles[p] else ""
            if not title and out and start == 0 and out[-1].end >= offsets[p] - len(PAGE_SEPARATOR) - 1:
                title, columns = out[-1].title, columns or out[-1].columns
            out.append(Table(offsets[p] + start, offsets[p] + end, title, columns))
    return out


def _as_laid_out(title: str, lines) -> str:
    key = re.sub(r"\s+", "", title).lower()
    if not key:
        return title
    for line in lines:
        compact = re.sub(r"\s+", "", line.text).lower()
        if compact.startswith(key) and len(compact) - len(key) <= 3:
            return line.text
    return title


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
        inline = _inline_row(cell) if not pending_years and not _VALUE.match(cell) else None
        if inline is not None:  # a whole row on one line: "Casino $ 5,734,173 $ 5,362,912"
            label, values = inline
            flush()
            if values and all(_YEAR.match(v) for v in values):
                years = values
                if label:
                    out.append(label)
                out.append(" | ".join(years))
            elif len(values) == len(years):
                out.append(" | ".join(([label] if label else []) + [f"{y}: {v}" for y, v in zip(years, values)]))
            else:
                out.append(" | ".join(([label] if label else []) + values))
            dollar = blank = False
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


_YEARS_ROW = re.compile(r"^((19|20)\d\d)( \| (19|20)\d\d)+$")
_UNITS = re.compile(r"^\(?\s*(in\s+)?(millions|thousands|billions|dollars|percent|\$)\b.*\)?$", re.I)
TITLE_LOOKBACK = 6  # non-blank lines above a table's first row searched for its title


def find_tables(page: str) -> list[tuple[int, int, str, str]]:
    """The tables in a page's text as :func:`table_rows` wrote it: ``(start, end, title, columns)``,
    offsets in ``page``. A table is a run of rows (``label | value | ...``) with at most three short
    lines between neighbours (sub-headings such as "Current assets:"), at least two rows; its
    columns are the years line above the rows and the period caption above that; its title the
    nearest short line above those that is neither a caption nor a unit ("(Millions)")."""
    lines = []
    pos = 0
    for raw in page.split("\n"):
        lines.append((pos, raw.strip()))
        pos += len(raw) + 1
    is_row = [(" | " in text and not _YEARS_ROW.match(text)) for _, text in lines]
    out = []
    i = 0
    while i < len(lines):
        if not is_row[i]:
            i += 1
            continue
        first = last = i
        j, between = i + 1, 0
        while j < len(lines):
            text = lines[j][1]
            if is_row[j]:
                last, between = j, 0
            elif text and (len(text) > 120 or text.endswith(".") or between >= 3):
                break
            elif text:
                between += 1
            j += 1
        rows = sum(is_row[first : last + 1])
        if rows >= 2:
            start, title, columns = _table_head(lines, first)
            end = lines[last][0] + len(page.split("\n")[last].rstrip())
            out.append((start, end, title, columns))
        i = last + 1
    return out


def _table_head(lines: list[tuple[int, str]], first: int) -> tuple[int, str, str]:
    """Where a table starts (its title's line), its title and its column headers, read upwards
    from its first row: past the sub-headings ("Cash Flows from Operating Activities") to the
    years line when there is one, then past the units and the period caption to the title."""
    start = lines[first][0]
    years = caption = title = ""
    k = first - 1
    for j in _above(lines, first):  # the years line, when the rows have one
        if _YEARS_ROW.match(lines[j][1]):
            years, start, k = lines[j][1], lines[j][0], j - 1
            break
    for j in _above(lines, k + 1):
        at, text = lines[j]
        if _UNITS.match(text) or (PERIOD_CAPTION.match(text) and len(text) <= 80):
            if not _UNITS.match(text) and not caption and re.search(r"[A-Za-z]", text):
                caption = text.rstrip(",:; ")
            start = at
        elif len(text.split()) == 1 and len(text) < 8:
            continue  # a column header's last word ("Total" / "Company")
        else:
            title, start = text, at
            break
    columns = f"{caption}: {years}" if caption and years else years or caption
    return start, title, columns


def _above(lines: list[tuple[int, str]], index: int):
    """Indexes of the non-blank lines above ``index``, nearest first, up to :data:`TITLE_LOOKBACK`
    of them and never past prose or another table's row."""
    seen = 0
    for j in range(index - 1, -1, -1):
        text = lines[j][1]
        if not text or len(text) <= 2:
            continue  # a blank, or the tail of a word pypdf broke ("Flow" / "s")
        caption = len(text) <= 80 and (_UNITS.match(text) or PERIOD_CAPTION.match(text))
        if not caption and (
            (" | " in text and not _YEARS_ROW.match(text)) or len(text) > 100 or text.endswith((".", ";", ","))
        ):
            return
        yield j
        seen += 1
        if seen >= TITLE_LOOKBACK:
            return


def _inline_row(line: str) -> tuple[str, list[str]] | None:
    """``(label, values)`` of a table row pypdf kept on one line: at least two values at its end
    (``$`` signs joined to their numbers), after a short label or none; None for anything else
    (prose that ends in a number has one, or ends in a period)."""
    words = line.split()
    values: list[str] = []
    k = len(words)
    while k > 0 and _VALUE.match(words[k - 1]) and not words[k - 1].endswith(","):
        k -= 1
        if words[k] == "$":
            if values:
                values[0] = "$" + values[0]
            continue
        values.insert(0, words[k])
    if len(values) < 2:
        return None
    label = " ".join(words[:k])
    if label.endswith((".", ",", ";", ":")) and len(label) > 60 or len(label) > 120:
        return None
    if all(_YEAR.match(v) for v in values) and len(label) > 40:
        return None  # "... in 2021 and 2022" is prose, "(Millions) 2018 2017" a header
    return label, values


def no_text_layer(data: bytes, n_pages: int) -> ParsedDocument:
    """What a PDF whose pages carry no text (scans, image-only pages) becomes.

    Reached when OCR is off, unavailable or read nothing: a named failure, so that a run reports
    the file instead of dropping it silently as empty.
    """
    raise ParseError(
        f"no text layer ({n_pages} page{'s' if n_pages != 1 else ''}): scanned or image-only PDF, "
        "and OCR read no text from it (or is off)"
    )


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
    except Exception as exc:  # noqa: BLE001 - pdfium refusing a file pypdf could read costs OCR only, not the text layer
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
    except Exception:  # noqa: BLE001 - a broken outline should not cost the document its text
        return []
    headings: list[Heading] = []
    items = _in_order(outline)
    for item, level in items:
        title = " ".join(str(getattr(item, "title", "") or "").split())
        try:
            page = reader.get_destination_page_number(item)
        except Exception:  # noqa: BLE001, S112 - an outline entry pointing nowhere costs its own heading
            continue
        if not title or page is None or not 0 <= page < len(offsets):
            continue
        headings.append(Heading(level, title, _outline_place(text, title, page, offsets)))
    headings.sort(key=lambda h: h.offset)  # bookmarks need not follow page order
    return headings


def _outline_place(text: str, title: str, page: int, offsets: list[int]) -> int:
    """Where a bookmark's title is written: on its page, else on the page after or before it
    (destinations often point at the end of the page before, or at the page a heading ends on),
    else at its page's start."""
    for p in (page, page + 1, page - 1):
        if 0 <= p < len(offsets):
            end = offsets[p + 1] if p + 1 < len(offsets) else len(text)
            at = locate(text, title.translate(_LIGATURES), offsets[p], end)
            if at is not None:
                return at
    return offsets[page]


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


def _metadata(reader) -> dict[str, str]:
    try:
        info = reader.metadata or {}
    except Exception:  # noqa: BLE001 - damaged document info costs the metadata only
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
