"""Long PDFs: running headers and footers removed, table rows rejoined with their column years,
a filing's type and period read from its cover and put in the chunk header."""

from __future__ import annotations

import pytest
from conftest import shared

from quarry.core.models import ParsedDocument
from quarry.ingest.context import RuleContextWriter, with_period
from quarry.ingest.facets import filing_context
from quarry.ingest.parsers import parse_file
from quarry.ingest.parsers.pdf import strip_running_lines, table_rows


def _pages(n: int) -> list[str]:
    words = [
        "revenue rose in every segment",
        "cash from operations fell",
        "the board approved a dividend",
        "inventories were written down",
        "debt was refinanced at lower rates",
    ]
    return [
        f"Table of Contents\n{words[i % 5]} on page {i}\n{words[(i + 2) % 5]} too\n\nAcme Corp | 2018 Form 10-K | {i + 1}"
        for i in range(n)
    ]


def test_running_headers_and_footers_go_and_the_body_stays():
    out = strip_running_lines(_pages(10))
    assert out[3] == "inventories were written down on page 3\nrevenue rose in every segment too"
    assert all("Table of Contents" not in p and "Form 10-K" not in p for p in out)


def test_lines_that_repeat_inside_pages_or_on_few_pages_stay():
    few = [
        "Only here\nbody one",
        "Only here\nbody two",
        "Other\nbody three",
        "Else\nbody four",
        "Again\nbody five",
        "More\nbody six",
        "Yet\nbody seven",
        "Last\nbody eight",
    ]
    assert strip_running_lines(few) == few  # two pages of eight share a first line: not a running header
    assert strip_running_lines(["Title\nbody"] * 3) == ["Title\nbody"] * 3  # too few pages to tell


def test_real_pdf_loses_its_running_title_and_page_numbers():
    doc = parse_file(str(shared("pdf", "levels_of_agi.pdf")))
    first_page = doc.text[: doc.page_offsets[1]]
    assert first_page.startswith("2023-11-04") and "Levels of AGI" in first_page  # page 1 keeps its title
    for i in range(1, len(doc.page_offsets) - 1):
        page = doc.text[doc.page_offsets[i] : doc.page_offsets[i + 1]].strip()
        assert not page.startswith("Levels of AGI: Operationalizing"), i
        assert page.splitlines()[-1].strip() != str(i + 1), i


def test_table_cells_are_joined_into_rows_labelled_by_year():
    page = (
        "Consolidated Statement of Cash Flows\n \n(Millions)\n \n2018\n \n2017\n \n2016\n \n"
        "Net income\n \n$\n5,363 \n \n$\n4,869 \n \n$\n5,058 \n \n"
        "Purchases of property, plant and equipment (PP&E)\n \n(1,577)\n \n(1,373)\n \n(1,420)\n \n"
        "Other — net\n \n9\n \n—\n \n(4)\n"
        "The accompanying notes are an integral part of this statement."
    )
    assert table_rows(page).split("\n") == [
        "Consolidated Statement of Cash Flows",
        "",
        "(Millions)",
        "2018 | 2017 | 2016",
        "Net income | 2018: $5,363 | 2017: $4,869 | 2016: $5,058",
        "",
        "Purchases of property, plant and equipment (PP&E) | 2018: (1,577) | 2017: (1,373) | 2016: (1,420)",
        "",
        "Other — net | 2018: 9 | 2017: — | 2016: (4)",
        "The accompanying notes are an integral part of this statement.",
    ]


def test_prose_and_rows_without_year_columns_keep_their_shape():
    prose = "First paragraph line\nsecond line, in 2019 terms.\n\nNext paragraph"
    assert table_rows(prose) == prose
    assert table_rows("Segment\nAmericas\n12.5%\n \n8\nEurope\n3") == "Segment\nAmericas | 12.5% | 8\nEurope | 3"


@pytest.mark.parametrize(
    "cover, expected",
    [
        (
            "UNITED STATES SECURITIES AND EXCHANGE COMMISSION FORM 10-K ANNUAL REPORT PURSUANT TO SECTION 13 "
            "For the fiscal year ended\nDecember 31, 2018 Commission file number 1-3285",
            {
                "doc_type": "Form 10-K annual report",
                "period": "fiscal year 2018 (ended December 31, 2018)",
                "fiscal_year": "FY2018",
            },
        ),
        (
            "FORM 10-Q QUARTERLY REPORT For the quarterly period ended July 2, 2023",
            {"doc_type": "Form 10-Q quarterly report", "period": "quarter ended July 2, 2023"},
        ),
        (
            "FORM 10-K For the fiscal year ended May 31, 2019 NIKE, Inc.",
            {
                "doc_type": "Form 10-K annual report",
                "period": "fiscal year 2019 (ended May 31, 2019)",
                "fiscal_year": "FY2019",
            },
        ),
        # the registrant's name above its caption; a space before the comma and a capitalised month
        (
            "FORM 10-K ANNUAL REPORT For the fiscal year ended\nDECEMBER 31 , 2020\nCommission file number: 1-3247\n \n"
            "CORNING INCORPORATED\n(Exact name of registrant as specified in its charter)",
            {
                "doc_type": "Form 10-K annual report",
                "period": "fiscal year 2020 (ended December 31, 2020)",
                "fiscal_year": "FY2020",
                "company": "CORNING INCORPORATED",
            },
        ),
        (
            "FORM 10-K For the fiscal year ended May 31, 2020 Commission file number \n1-442 \u00a0\n"
            "THE BOEING COMPANY \u00a0 (Exact name of registrant as specified in its charter)",
            {
                "doc_type": "Form 10-K annual report",
                "period": "fiscal year 2020 (ended May 31, 2020)",
                "fiscal_year": "FY2020",
                "company": "THE BOEING COMPANY",
            },
        ),
        # a caption with no name above it, or outside a filing, names no company
        ("FORM 10-K\n(Exact name of registrant as specified in its charter)", {"doc_type": "Form 10-K annual report"}),
        ("Minutes\nACME Corp\n(exact name of registrant)", {}),
        ("A research paper about fusion functions, 2023.", {}),
    ],
)
def test_filing_type_and_period_from_the_cover(cover, expected):
    assert filing_context(cover) == expected


def test_period_goes_into_the_title_line_of_every_header():
    meta = {
        "doc_type": "Form 10-K annual report",
        "period": "fiscal year 2018 (ended December 31, 2018)",
        "fiscal_year": "FY2018",
        "company": "3M COMPANY",
    }
    # the company and FY2018 are for the document's card (quarry/retrieval/cards.py), not every header
    assert (
        with_period("3M Company", meta)
        == "3M Company (Form 10-K annual report, fiscal year 2018 (ended December 31, 2018))"
    )
    assert with_period("3M Company", {}) == "3M Company"
    doc = ParsedDocument(
        text="Cover.\n\nBody text of the filing, long enough to be prose here.", title="3M Company", metadata=meta
    )
    from quarry.core.models import FileInfo, Section

    file = FileInfo(
        path="/r/3M_2018_10K.pdf", root="/r", rel_path="3M_2018_10K.pdf", file_type="pdf", size=1, mtime=0.0, sha256=""
    )
    title, _ = RuleContextWriter().document_context(doc, file, [])
    header = RuleContextWriter().header(title, "", Section(index=0, title="", level=1, start=0, end=10))
    assert header == "Document: 3M Company (Form 10-K annual report, fiscal year 2018 (ended December 31, 2018))"
