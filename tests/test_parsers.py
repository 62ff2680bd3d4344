"""Parsers on the real sample files in ../shared/data/formats, plus hand-made broken ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quarry.core.errors import ParseError, UnsupportedFile
from quarry.core.models import Heading
from quarry.ingest.parsers import SUPPORTED, file_type_for, parse_file
from quarry.ingest.parsers.pdf import _clean_title

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "formats"
if not DATA.is_dir():
    pytest.skip(f"sample documents not found at {DATA.resolve()}", allow_module_level=True)

LAYOUT_TITLE = "LayoutParser: A Unified Toolkit for Deep Learning Based Document Image Analysis"


def parse(name: str):
    return parse_file(str(DATA / name))


def write(tmp_path: Path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return str(path)


def heading_tuples(doc) -> list[tuple[int, str]]:
    return [(h.level, h.title) for h in doc.headings]


# --- dispatch -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,expected",
    [
        ("a/b/notes.md", "md"),
        ("X.MARKDOWN", "md"),
        ("page.mdx", "md"),
        ("readme.txt", "txt"),
        ("log.text", "txt"),
        ("index.rst", "rst"),
        ("site/Index.HTM", "html"),
        ("page.xhtml", "html"),
        ("paper.pdf", "pdf"),
        ("memo.docx", "docx"),
        ("old.doc", "doc"),  # converted by LibreOffice
        ("deck.pptx", "pptx"),
        ("data.csv", "csv"),
        ("Makefile", ""),
        ("archive.tar.gz", "tar"),  # two suffixes: a tar, not a gzip
        ("Backup.TGZ", "tar"),
        ("notes.txt.gz", ""),
        ("bundle.zip!/dir/memo.docx", "docx"),  # an archive member by its own name
    ],
)
def test_file_type_for(path, expected):
    assert file_type_for(path) == expected


@pytest.mark.parametrize(
    "name",
    [
        "a.tar.gz",
        ".bashrc",
        "..md",
        "...a.md",
        "a.",
        "a",
        "a..md",
        ".a.md",
        "x.y.",
        ".",
        "",
        "A.MD",
        "dir.d/file",
        "dir.d/.md",
    ],
)
def test_the_suffix_split_is_splitexts(name):
    # discovery's own split of a name (faster than os.path's) must agree with os.path.splitext
    import os

    from quarry.ingest.parsers import _split_suffix

    base = name.rsplit("/", 1)[-1]
    assert _split_suffix(base) == os.path.splitext(base)
    stem, ext = os.path.splitext(base.lower())
    by_splitext = SUPPORTED.get(os.path.splitext(stem)[1] + ext) or SUPPORTED.get(ext, "")
    assert file_type_for(name) == by_splitext


def test_supported_types_are_all_parseable():
    assert {"md", "txt", "rst", "html", "pdf", "docx", "pptx", "xlsx", "eml", "epub"} <= set(SUPPORTED.values())


def test_unsupported_file_raises(tmp_path):
    path = write(tmp_path, "data.qqq", "a,b\n1,2\n")
    with pytest.raises(UnsupportedFile, match="data.qqq"):
        parse_file(path)
    # An explicit type overrides the suffix.
    assert parse_file(path, file_type="txt").text == "a,b\n1,2\n"


def test_missing_file_is_a_parse_error(tmp_path):
    with pytest.raises(ParseError, match="cannot read file"):
        parse_file(str(tmp_path / "gone.md"))


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.iterdir() if file_type_for(p.name)))
def test_every_sample_parses_or_fails_cleanly(name):
    if name == "password.pdf":
        with pytest.raises(ParseError):
            parse(name)
        return
    doc = parse(name)
    assert isinstance(doc.text, str)
    assert (doc.text == "") == (name == "empty.txt")
    assert [h.offset for h in doc.headings] == sorted(h.offset for h in doc.headings)
    assert all(0 <= h.offset < len(doc.text) for h in doc.headings)


def test_importing_parsers_does_not_import_libraries():
    code = "import sys, quarry.ingest.parsers; print(sorted({'pypdf', 'docx', 'selectolax'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- text: encodings, binary, empty ---------------------------------------------------------


def test_empty_file_gives_empty_text():
    doc = parse("empty.txt")
    assert doc.text == "" and doc.title is None and doc.headings == []


@pytest.mark.parametrize("name", ["blank.txt", "blank.md", "blank.pdf"])
def test_whitespace_or_zero_bytes_is_empty_not_an_error(tmp_path, name):
    data = b"" if name.endswith(".pdf") else b"  \r\n\t\n"
    assert parse_file(write(tmp_path, name, data)).text == ""


def test_utf16_with_bom():
    text = parse("fake-text-utf-16.txt").text
    assert text.startswith("This is a test document to use for unit tests.")
    assert "Doylestown, PA 18901" in text
    assert "- Hamburgers are delicious" in text
    assert "\x00" not in text and "\r" not in text


def test_latin1_markdown_umlauts():
    # The file is "## k\xf6nnen\n\nk\xf6nnen\n\n\xe4\xf6\xfc\xdf\n" in latin-1, invalid as UTF-8.
    assert (DATA / "umlauts-non-utf8.md").read_bytes()[3:9] == b"k\xf6nnen"
    doc = parse("umlauts-non-utf8.md")
    assert doc.text == "## können\n\nkönnen\n\näöüß\n"
    assert doc.headings == [Heading(2, "können", 0)]
    assert doc.title == "können"


SAMPLE = "Grüße “quoted” — naïve café\r\nsecond line\rthird\n"


@pytest.mark.parametrize(
    "encoded",
    [
        SAMPLE.encode("utf-8"),
        SAMPLE.encode("utf-8-sig"),
        SAMPLE.encode("utf-16"),  # with BOM
        SAMPLE.encode("utf-16-be"),  # without BOM
        SAMPLE.encode("utf-16-le"),  # without BOM
        SAMPLE.encode("utf-32"),
        SAMPLE.encode("cp1252"),
    ],
    ids=["utf8", "utf8-sig", "utf16-bom", "utf16be", "utf16le", "utf32", "cp1252"],
)
def test_encodings_and_newlines(tmp_path, encoded):
    text = parse_file(write(tmp_path, "sample.txt", encoded)).text
    assert text == "Grüße “quoted” — naïve café\nsecond line\nthird\n"


@pytest.mark.parametrize("keep_nuls", [True, False])
def test_binary_data_under_text_name(tmp_path, keep_nuls):
    data = bytes(range(256)) * 8 + os.urandom(2048)
    if not keep_nuls:
        data = data.replace(b"\x00", b"")
    with pytest.raises(ParseError, match="binary data under a text name"):
        parse_file(write(tmp_path, "notes.txt", data))


def test_plain_text_has_no_headings():
    doc = parse("book-war-and-peace-1p.txt")
    assert doc.text.startswith('CHAPTER I\n\n"Well, Prince, so Genoa and Lucca')
    assert doc.headings == [] and doc.title is None


# --- markdown ---------------------------------------------------------------------------------


def test_headings_inside_code_fences_are_ignored():
    doc = parse("codeblock.md")
    assert heading_tuples(doc) == [(2, "HTML Example"), (2, "XML Example")]
    assert doc.text[doc.headings[1].offset :].startswith("## XML Example")
    assert "<h1>Hello, World!</h1>" in doc.text  # code stays in the text
    assert doc.title == "HTML Example"  # no level-1 heading: the first one


def test_markdown_atx_setext_and_offsets(tmp_path):
    source = (
        "Intro line\n\n"
        "Main Title\n==========\n\n"
        "text\n\n"
        "## Install ##\n\n"
        "~~~\n# not a heading\n~~~~\n\n"
        "```bash\n# install it\npip install quarry\n```\n"
        "````\n```\n## still code\n````\n\n"
        "Sub part\n--------\n\n"
        "- list item\n---\n\n"
        "    # indented code\n"
        "#hashtag\n"
        "### C# ###\n"
    )
    doc = parse_file(write(tmp_path, "doc.md", source))
    assert heading_tuples(doc) == [(1, "Main Title"), (2, "Install"), (2, "Sub part"), (3, "C#")]
    starts = ["Main Title\n===", "## Install", "Sub part\n---", "### C#"]
    assert [doc.text[h.offset : h.offset + len(s)] for h, s in zip(doc.headings, starts)] == starts
    assert doc.title == "Main Title"


def test_markdown_front_matter(tmp_path):
    source = '---\ntitle: "Quarterly Report"\nauthor: Ana\ntags:\n  - a\n---\n\n# Overview\n\nBody.\n'
    doc = parse_file(write(tmp_path, "report.md", source))
    assert doc.title == "Quarterly Report"
    assert doc.metadata == {"title": "Quarterly Report", "author": "Ana", "tags": "a"}
    assert doc.text == "# Overview\n\nBody.\n"
    assert doc.headings == [Heading(1, "Overview", 0)]


def test_markdown_nested_front_matter_keeps_its_structure_and_scalars_as_written(tmp_path):
    source = (
        "---\nTitle: Release notes\nversion: 1.10\ndate: 2024-01-05\ndraft: false\nempty:\n"
        "tags: [a, b]\nauthor:\n  name: Ana\n  team: [docs, search]\n...\n# Notes\n"
    )
    doc = parse_file(write(tmp_path, "notes.md", source))
    assert doc.metadata == {
        "title": "Release notes",
        "version": "1.10",
        "date": "2024-01-05",
        "draft": "false",
        "tags": "a, b",
        "author": '{"name":"Ana","team":["docs","search"]}',
    }
    assert doc.title == "Release notes" and doc.text == "# Notes\n"
    assert doc.headings == [Heading(1, "Notes", 0)]


@pytest.mark.parametrize(
    "source",
    [
        "---\ntitle: [never closed\n---\n# Body\n",  # bad YAML
        "---\njust a line of prose\n---\n# Body\n",  # not a mapping: two thematic breaks around text
    ],
)
def test_markdown_front_matter_that_is_not_a_yaml_mapping_stays_text(tmp_path, source):
    doc = parse_file(write(tmp_path, "a.md", source))
    assert doc.metadata == {} and doc.text == source
    assert doc.title == "Body"


# The five cases a line scanner got wrong, then five it already got right; the expected headings
# are CommonMark's (level, title, line of the heading's first line).
COMMONMARK_CASES = [
    ("html-comment", "<!--\n# not a heading\n-->\n\n# Real\n", [(1, "Real", 4)]),
    ("pre-block", "<pre>\n# not a heading\n</pre>\n\n# Real\n", [(1, "Real", 4)]),
    ("block-quote", "> # Quoted\n>\n> text\n", [(1, "Quoted", 0)]),
    ("list-item", "- # In a list\n- item\n", [(1, "In a list", 0)]),
    ("lazy-continuation-then-rule", "> foo\nbar\n---\n", []),
    ("fenced-code", "```\n# not a heading\n```\n# Real\n", [(1, "Real", 3)]),
    ("no-space-after-hash", "#5 bolt\n#hashtag\n####### seven\n", []),
    ("setext", "Title\n=====\n\nSub\npart\n---\n", [(1, "Title", 0), (2, "Sub part", 3)]),
    ("indented-code", "    # code\n\n# Real\n", [(1, "Real", 2)]),
    ("closing-hashes", "# Title #\n## Sub ##   \n", [(1, "Title", 0), (2, "Sub", 1)]),
]


@pytest.mark.parametrize("name, source, expected", COMMONMARK_CASES, ids=[c[0] for c in COMMONMARK_CASES])
def test_markdown_headings_follow_commonmark(name, source, expected):
    from quarry.ingest.parsers.text import markdown_headings

    headings = markdown_headings(source)
    assert [(h.level, h.title, source[: h.offset].count("\n")) for h in headings] == expected
    starts = [0] + [i + 1 for i, ch in enumerate(source) if ch == "\n"]
    assert all(h.offset in starts for h in headings)  # offsets are line starts


def test_markdown_title_prefers_level_one(tmp_path):
    doc = parse_file(write(tmp_path, "a.md", "## Setup\n\n# Real Title\n"))
    assert doc.title == "Real Title"


# --- reStructuredText -------------------------------------------------------------------------


def test_rst_headings_from_sample():
    doc = parse("README.rst")
    assert heading_tuples(doc) == [(1, "Example Docs"), (2, "XBRL 10-K")]
    assert doc.headings[0].offset == 0
    assert doc.text[doc.headings[1].offset :].startswith("XBRL 10-K\n^^^^")
    assert doc.title == "Example Docs"


def test_rst_overline_styles_and_levels(tmp_path):
    source = (
        "=======\n Title\n=======\n\n"
        "Intro.\n\n"
        "Part A\n------\n\n"
        "Detail\n~~~~~~\n\n"
        "Part B\n------\n\n"
        "Too long title\n---\n\n"
        "----\n\n"
        "After a transition.\n"
    )
    doc = parse_file(write(tmp_path, "doc.rst", source))
    assert heading_tuples(doc) == [(1, "Title"), (2, "Part A"), (3, "Detail"), (2, "Part B")]
    assert doc.headings[0].offset == 0
    assert doc.title == "Title"


# --- HTML -----------------------------------------------------------------------------------


def test_html_sample_headings_lists_and_table():
    doc = parse("fake-html.html")
    assert heading_tuples(doc) == [(1, "My First Heading"), (2, "My Second Heading"), (3, "A Third Heading")]
    for heading in doc.headings:
        assert doc.text[heading.offset :].startswith(heading.title)
    assert doc.title == "My First Heading"  # no <title>: the first h1
    assert "With sub-bullets!\nAnd another" in doc.text
    assert doc.text.endswith("Column 1 | Column 2\nRow 1, Cell 1 | Row 1, Cell 2\nRow 2, Cell 1 | Row 2, Cell 2")


def test_html_inline_xbrl_filing():
    doc = parse("example-10k-1p.html")
    assert doc.title is None  # <title> is blank and there is no h1
    assert "Galaxy Gaming, Inc." in doc.text
    assert "Item 1A. | Risk Factors | 9" in doc.text
    assert "Commission file number: 000-30653" in doc.text
    assert "<" not in doc.text and "  " not in doc.text


def test_html_drops_invisible_and_honours_meta_charset(tmp_path):
    page = (
        '<html><head><meta charset="iso-8859-1"><title>Caf\xe9 menu</title>'
        "<style>p { color: red }</style><script>var x = 'hidden';</script></head>"
        "<body><h1>Caf\xe9</h1><p>Cr\xe8me<br>br\xfbl\xe9e</p><div style='display: none'>secret</div>"
        "<noscript>enable js</noscript><pre>  a\n    b</pre><h2>Sub <em>part</em></h2>end</body></html>"
    ).encode("latin-1")
    doc = parse_file(write(tmp_path, "menu.html", page))
    assert doc.title == "Café menu"
    assert doc.text == "Café\n\nCrème\nbrûlée\n\n  a\n    b\n\nSub part\n\nend"
    assert doc.headings == [Heading(1, "Café", 0), Heading(2, "Sub part", doc.text.index("Sub part"))]


# --- PDF ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,pages,phrase,page",
    [
        ("fake-memo.pdf", 1, "20,000 bottles of water", 1),
        ("layout-parser-paper-fast.pdf", 2, "layout detection [38, 22], table detection", 2),
        ("layout-parser-paper-with-empty-pages.pdf", 4, "layout detection [38, 22], table detection", 4),
        ("multi-column-2p.pdf", 2, "Dense Passage Retrieval for Open-Domain Question Answering", 1),
        ("copy-protected.pdf", 2, "layout detection [38, 22], table detection", 2),
    ],
)
def test_pdf_pages(name, pages, phrase, page):
    doc = parse(name)
    assert len(doc.page_offsets) == pages
    assert doc.page_offsets[0] == 0 and doc.page_offsets == sorted(doc.page_offsets)
    assert doc.page_at(doc.text.index(phrase)) == page
    assert "\x00" not in doc.text


def test_pdf_empty_pages_keep_their_place():
    doc = parse("layout-parser-paper-with-empty-pages.pdf")
    first, second, third, fourth = doc.page_offsets
    assert doc.text[second:fourth].strip() == ""  # pages 2 and 3 have no text layer
    assert doc.text[first:second].startswith("LayoutParser: A Unified Toolkit for Deep\n")
    assert doc.text[fourth:].startswith("2Z.Shenetal.\n37], layout detection")  # pypdf drops spaces here
    assert doc.page_at(second) == 2 and doc.page_at(third) == 3


@pytest.mark.parametrize(
    "name", ["layout-parser-paper-fast.pdf", "layout-parser-paper-with-empty-pages.pdf", "copy-protected.pdf"]
)
def test_pdf_outline_becomes_headings(name):
    doc = parse(name)
    # a one-entry outline (the title) gives way to the headings the fonts set apart
    assert heading_tuples(doc) == [(1, LAYOUT_TITLE), (2, "1 Introduction")]
    # Placed on the title's text on page 1 (ligature "ﬁ" folded so "Unified" matches).
    assert doc.text[doc.headings[0].offset :].startswith("LayoutParser: A Unified Toolkit for Deep\nLearning")
    assert doc.title is None  # no /Title in the metadata; the outline is not the title


def test_pdf_metadata_title():
    assert parse("fake-memo.pdf").title == "fake-memo"
    assert parse("multi-column-2p.pdf").title is None  # /Title is present but empty


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("Microsoft Word - report.doc", None),
        ("untitled", None),
        ("Untitled-3", None),
        ("scan_0042.pdf", None),
        ("  ", None),
        ("12345", None),
        ("Annual Report 2021", "Annual Report 2021"),
    ],
)
def test_pdf_junk_titles(raw, expected):
    assert _clean_title(raw) == expected


def test_encrypted_pdf_needs_password():
    with pytest.raises(ParseError, match=r"^encrypted PDF \(password required\)$"):
        parse("password.pdf")


def test_copy_protected_pdf_opens_with_empty_password():
    doc = parse("copy-protected.pdf")
    assert doc.text.startswith("LayoutParser: A Unified Toolkit")


@pytest.mark.parametrize("size", [1000, 20000])
def test_truncated_pdf(tmp_path, size):
    data = (DATA / "layout-parser-paper-fast.pdf").read_bytes()[:size]
    with pytest.raises(ParseError, match="^not valid PDF: "):
        parse_file(write(tmp_path, "cut.pdf", data))


def test_non_pdf_bytes_under_pdf_name(tmp_path):
    with pytest.raises(ParseError, match="^not valid PDF"):
        parse_file(write(tmp_path, "fake.pdf", "just some text, not a PDF\n" * 20))


# --- DOCX -----------------------------------------------------------------------------------


def test_docx_tables_in_body_order():
    doc = parse("docx-tables.docx")
    assert doc.text == (
        "Simple uniform table\n\n"
        "Header Col 1 | Header Col 2\nLorem ipsum | A link example\n\n"
        "Nested Table\n\n"
        "a | >b< | c\nd | e, f; g&t, h | i\nj | k | l\n\n"
        "Table with merged cells\n\n"
        "a | b\nc | d\ne"  # merged cells appear once
    )
    assert doc.headings == [] and doc.title is None


def test_docx_heading_style_and_metadata():
    doc = parse("duplicate-paragraphs.docx")
    assert doc.headings == [Heading(1, "This document contains duplicates", 0)]
    assert doc.title == "This document contains duplicates"
    assert doc.text.count("some text") == 6
    assert doc.metadata == {"author": "python-docx"}


def test_docx_title_style_and_core_title(tmp_path):
    import docx

    document = docx.Document()
    document.add_paragraph("The Styled Title", style="Title")
    document.add_paragraph("Intro.")
    document.add_heading("Chapter", level=1)
    document.add_heading("Section", level=2)
    path = tmp_path / "made.docx"
    document.save(path)
    doc = parse_file(str(path))
    assert heading_tuples(doc) == [(1, "The Styled Title"), (1, "Chapter"), (2, "Section")]
    assert doc.text.index("Section") == doc.headings[2].offset
    assert doc.title == "The Styled Title"

    document.core_properties.title = "Core Title"
    document.save(path)
    assert parse_file(str(path)).title == "Core Title"


@pytest.mark.parametrize("data", [b"not a zip at all" * 10, b"PK\x03\x04" + os.urandom(500)])
def test_corrupt_docx(tmp_path, data):
    with pytest.raises(ParseError, match="^corrupt DOCX: "):
        parse_file(write(tmp_path, "broken.docx", data))
