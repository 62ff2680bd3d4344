"""A long PDF's page text read by several processes (pdf.parse_pdf's page_workers): the document is
the serial parse's, a damaged page costs its own text either way, a helper's lost pages are read
again, the parse pool gives a lone long PDF its spare cores (and many PDFs none), and a helper is
held to the CPU budget of its file."""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import re
import time
from dataclasses import asdict
from functools import partial

import pytest

from quarry.core.models import FileInfo
from quarry.ingest import process
from quarry.ingest.parsers import pdf

SPLIT_LINE = re.compile(r"\d+ pages read in \d+ processes: ")


def shared(*parts: str):
    # conftest imported here, not at the top: a helper that unpickles _die_after_one_page imports
    # this module, and conftest would give it a Prefect home of its own
    from conftest import shared

    return shared(*parts)


def _repeated(times: int) -> bytes:
    """levels_of_agi.pdf ``times`` over: 19 real pages each (38 for two, past SPLIT_MIN_PAGES)."""
    from pypdf import PdfWriter

    src = shared("pdf", "levels_of_agi.pdf")
    writer = PdfWriter(clone_from=src)
    for _ in range(times - 1):
        writer.append(src)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _damaged(*pages: int) -> bytes:
    """levels_of_agi.pdf twice over with ``pages`` (0-based) behind a filter no reader knows: pypdf
    raises on those pages' text alone."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject, StreamObject

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(_repeated(2))))
    for page in pages:
        stream = StreamObject()
        stream[NameObject("/Filter")] = NameObject("/NoSuchDecode")
        stream._data = b"BT ET"  # raw bytes as written: set_data would encode them with the filter
        writer.pages[page][NameObject("/Contents")] = writer._add_object(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _die_after_one_page(fn, data: bytes, n: int):
    """A helper's ``run`` that claims a page, then ends the helper's process: that page is lost."""
    next(pdf._claim(pdf._COUNTER, n), None)
    os._exit(70)


def _split_logged(caplog) -> list[str]:
    """The split parses' summary lines ("38 pages read in 2 processes: ...")."""
    return [r.getMessage() for r in caplog.records if r.name == pdf.__name__ and SPLIT_LINE.match(r.getMessage())]


def _no_helpers_left(within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not multiprocessing.active_children()


@pytest.mark.parametrize(
    ("name", "times", "workers"),
    [
        ("pdf/levels_of_agi.pdf", 3, 2),
        ("pdf/levels_of_agi.pdf", 3, 3),
        ("formats/layout-parser-paper-with-empty-pages.pdf", 1, 2),  # 4 pages, one of them empty
    ],
)
def test_pages_read_in_several_processes_give_the_serial_document(name, times, workers, monkeypatch, caplog):
    monkeypatch.setattr(pdf, "SPLIT_MIN_PAGES", 2)
    data = _repeated(times) if times > 1 else shared(*name.split("/")).read_bytes()
    serial = pdf.parse_pdf(data, ocr=False)
    with caplog.at_level(logging.DEBUG, logger=pdf.__name__):
        split = pdf.parse_pdf(data, ocr=False, page_workers=workers)
    assert _split_logged(caplog), "the parse did not take the split path"
    assert split.text == serial.text and split.text
    assert split.page_offsets == serial.page_offsets
    assert split.headings == serial.headings and split.tables == serial.tables
    assert split.warnings == serial.warnings
    assert asdict(split) == asdict(serial)
    assert _no_helpers_left()


def test_a_damaged_page_costs_its_own_text_either_way():
    data = _damaged(3, 30)
    serial = pdf.parse_pdf(data, ocr=False)
    assert serial.warnings == [
        f"page {p} could not be read: NotImplementedError: Unsupported filter /NoSuchDecode" for p in (4, 31)
    ]
    assert not serial.text[serial.page_offsets[30] : serial.page_offsets[31]].strip()  # its text alone is lost
    assert asdict(pdf.parse_pdf(data, ocr=False, page_workers=2)) == asdict(serial)
    # a helper reads a damaged page as this process does: its reason, not an exception
    pdf._share_counter(multiprocessing.get_context("spawn").Value("i", 28))
    texts, errors = pdf._helper_texts(data, 32)
    assert sorted(texts) == [28, 29, 30, 31] and texts[30] == ""
    assert errors == [(30, "NotImplementedError: Unsupported filter /NoSuchDecode")]


def test_pages_a_dying_helper_claimed_are_read_here(monkeypatch, caplog):
    data = _repeated(6)  # 114 pages: the helper claims its page long before this process is done
    with caplog.at_level(logging.DEBUG, logger=pdf.__name__), pdf.split_pages(2, _die_after_one_page):
        split = pdf.parse_pdf(data, ocr=False)
    assert "a page helper failed" in caplog.text
    assert _split_logged(caplog)[0].endswith("113 here, 0 by helpers, 1 read here again (their helper failed)")
    assert asdict(split) == asdict(pdf.parse_pdf(data, ocr=False))
    assert _no_helpers_left()


def test_the_split_is_asked_for_by_a_split_pages_block(caplog):
    """How the parse pool asks for it: no argument, a ``split_pages`` block around the parse."""
    data = _repeated(2)
    with caplog.at_level(logging.DEBUG, logger=pdf.__name__):
        pdf.parse_pdf(data, ocr=False)
        assert not _split_logged(caplog)
        with pdf.split_pages(2):
            pdf.parse_pdf(data, ocr=False)
        assert len(_split_logged(caplog)) == 1
        pdf.parse_pdf(data, ocr=False)  # the block is over: serial again
        pdf.parse_pdf(shared("pdf", "levels_of_agi.pdf").read_bytes(), ocr=False, page_workers=2)  # 19 pages: too short
        assert len(_split_logged(caplog)) == 1


def _file(path) -> FileInfo:
    stat = path.stat()
    return FileInfo(str(path), str(path.parent), path.name, "pdf", stat.st_size, stat.st_mtime, "")


def test_parse_files_gives_a_lone_long_pdf_the_spare_cores_and_many_pdfs_none(tmp_path, caplog):
    data = _repeated(2)
    paths = []
    for name in ("a.pdf", "b.pdf"):
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    serial = pdf.parse_pdf(data, ocr=False)
    with caplog.at_level(logging.DEBUG, logger="quarry"):
        (lone,) = process.parse_files([_file(paths[0])], workers=2, ocr=False)
    # logged in the pool's worker, handed back with its result
    assert [m.split(":")[0] for m in _split_logged(caplog)] == ["38 pages read in 2 processes"]
    assert not isinstance(lone, str), lone
    assert lone.text == serial.text and lone.page_offsets == serial.page_offsets and lone.tables == serial.tables
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="quarry"):
        both = process.parse_files([_file(p) for p in paths], workers=2, ocr=False)
        assert not _split_logged(caplog)  # two files, two workers: no core to spare
        process.parse_files([_file(paths[0])], workers=2, ocr=False, page_workers=1)
        assert not _split_logged(caplog)  # asked for none
    assert [getattr(d, "text", d) for d in both] == [serial.text, serial.text]


def test_a_helper_over_its_cpu_budget_makes_the_parse_over_budget():
    """Only the helper is budgeted here: 0.3 s of CPU, past its imports (pypdf: about 0.1 s) and into
    its share of 114 pages (about 1 s). The parse that started it fails with its budget's exception
    (which the parse pool reports as over budget), and no helper outlives it."""
    data = _repeated(6)
    with pytest.raises(process._OverBudget), pdf.split_pages(2, partial(process._budgeted, 0.3)):
        pdf.parse_pdf(data, ocr=False)
    assert _no_helpers_left()
    with pdf.split_pages(2, partial(process._budgeted, 60.0)):  # a budget it keeps: the serial document
        assert asdict(pdf.parse_pdf(data, ocr=False)) == asdict(pdf.parse_pdf(data, ocr=False, page_workers=1))


def test_the_parse_over_its_own_budget_stops_its_helpers_at_once():
    """The budget's exception raised in the parsing process (at 0.5 s of its CPU: past the helper's
    start, within its layout read or its pages) while its helper still reads its share of 114 pages
    (about 1 s): the helper is killed, not left to finish."""
    data = _repeated(6)
    with pytest.raises(process._OverBudget), process._cpu_budget(0.5):
        pdf.parse_pdf(data, ocr=False, page_workers=2)
    assert _no_helpers_left(within=0.5)
