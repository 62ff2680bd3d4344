"""The formats of issue 15 on real files: written here with each format's own writer library
(openpyxl, python-pptx, email, ebooklib, odfpy...), the shared samples where they exist, a
corrupt file of each family that must end in a named failure, and a mixed tree through the
real flow. OCR tests are ``slow`` (tens of seconds a page on a small machine)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

import quarry
from quarry.core.errors import ParseError
from quarry.ingest.chunking import chunk_document
from quarry.ingest.parsers import FORMATS, SUPPORTED, detect_type, parse_file
from quarry.ingest.sectioning import StructureSectioner
from tests.conftest import shared
from tests.samples import mixed_tree, write_eml, write_epub, write_ods, write_odt, write_pptx, write_xlsx


def _chunks(doc, size=800):
    sections = StructureSectioner(4000).sections(doc)
    return chunk_document("d", doc, sections, [""] * len(sections), size=size, min_chunk=200)


# --- per format --------------------------------------------------------------------------------


def test_every_registered_extension_maps_to_one_format():
    exts = [e for f in FORMATS.values() for e in f.extensions]
    assert len(exts) == len(set(exts)) == len(SUPPORTED)
    assert {"pptx", "xlsx", "csv", "eml", "msg", "epub", "odt", "rtf", "yaml", "image"} <= set(SUPPORTED.values())


def test_xlsx_sheets_are_sections_and_every_chunk_repeats_the_header(tmp_path):
    doc = parse_file(str(write_xlsx(tmp_path / "stock.xlsx")))
    assert [h.title for h in doc.headings] == ["Inventory", "Suppliers"]
    chunks = _chunks(doc)
    assert len(chunks) > 5
    rows = [c for c in chunks if "widget-" in c.text]
    assert rows and all("Part | Warehouse | Quantity" in c.text for c in rows)
    assert all(c.text.lstrip().startswith(("Part | Warehouse", "Inventory")) for c in rows)
    assert "Quillfeather Ltd | Iceland" in doc.text


def test_huge_sheet_is_bounded_and_says_so(tmp_path, monkeypatch):
    from quarry.ingest.parsers import sheets

    monkeypatch.setattr(sheets, "MAX_ROWS", 50)
    doc = parse_file(str(write_xlsx(tmp_path / "big.xlsx", rows=120)))
    assert doc.metadata["rows_dropped"] == "70"  # 120 data rows under the header, 50 kept
    assert "70 more rows not indexed" in doc.text


def test_shared_xlsx_and_csv():
    xlsx = parse_file(str(shared("formats", "stanley-cups.xlsx")))
    assert [h.title for h in xlsx.headings] == ["Stanley Cups", "Stanley Cups Since 67"]
    assert "Team | Location | Stanley Cups\nBlues | STL | 1" in xlsx.text
    csv_doc = parse_file(str(shared("formats", "stanley-cups.csv")))
    assert "Maple Leafs | TOR | 13" in csv_doc.text


def test_csv_dialect_and_encoding_are_sniffed(tmp_path):
    path = tmp_path / "villes.csv"
    rows = [
        "Ville;Région;Habitants",
        "Zürich;Zürich;415000",
        "Genève;Genève;203000",
        "Besançon;Franche-Comté;117000",
        "Pontevedra;Galicia;83000",
        "Málaga;Andalucía;578000",
        "Córdoba;Andalucía;320000",
    ]
    path.write_bytes("\n".join(rows).encode("cp1252"))
    doc = parse_file(str(path))
    assert "Ville | Région | Habitants" in doc.text and "Genève | Genève | 203000" in doc.text
    tsv = tmp_path / "t.tsv"
    tsv.write_text("a\tb\n1\t2\n")
    assert parse_file(str(tsv)).text == "a | b\n1 | 2"


def test_ods_sheet(tmp_path):
    doc = parse_file(str(write_ods(tmp_path / "birds.ods")))
    assert [h.title for h in doc.headings] == ["Birds"]
    assert "Species | Count\nPuffin | 12" in doc.text


def test_pptx_slides_are_sections_with_slide_numbers_as_pages(tmp_path):
    doc = parse_file(str(write_pptx(tmp_path / "deck.pptx")))
    assert [h.title for h in doc.headings] == ["Slide 1: Quarterly heliotrope review", "Slide 2: Regional table"]
    assert len(doc.page_offsets) == 2
    assert doc.page_at(doc.text.index("marmalade")) == 1
    assert doc.page_at(doc.text.index("Zanzibar | 42")) == 2
    assert doc.page_at(doc.text.index("Notes: Mention the okapi")) == 2


def test_shared_pptx_table():
    doc = parse_file(str(shared("formats", "fake-power-point-table.pptx")))
    assert "Tangerine | Pink | Aqua" in doc.text and doc.page_offsets == [0]


def test_eml_headers_are_metadata_body_prefers_text_and_attachments_are_sections(tmp_path):
    doc = parse_file(str(write_eml(tmp_path / "note.eml")))
    meta = doc.metadata
    assert meta["from"] == "Ada Lovelace <Ada@Example.org>" and meta["from_address"] == "ada@example.org"
    assert meta["to"] == "Charles Babbage <charles@example.org>" and meta["cc"] == "team@example.org"
    assert meta["subject"] == doc.title == "Analytical engine notes"
    assert meta["message_id"] == "<note-g@example.org>" and meta["date"] == "1843-12-10T10:00:00+00:00"
    assert meta["attachments"] == "table.csv, blob.bin"
    assert "Jacquard loom" in doc.text and "should not win" not in doc.text
    assert [h.title for h in doc.headings] == ["Analytical engine notes", "Attachment: table.csv"]
    assert "name | role\nBernoulli | numbers" in doc.text


def test_shared_eml_and_msg():
    for name in ("fake-email.eml", "fake-email.msg"):
        doc = parse_file(str(shared("formats", name)))
        assert doc.metadata["from_address"] == "mrobinson@unstructured.io"
        assert "Violets are blue" in doc.text and doc.title == "Test Email"


@pytest.mark.parametrize(
    "codec,bom",
    [
        ("utf-16-le", b"\xff\xfe"),
        ("utf-16-be", b"\xfe\xff"),
        ("utf-16-le", b""),
        ("utf-16-be", b""),
        ("utf-8", b"\xef\xbb\xbf"),
    ],
)
def test_mail_saved_as_utf16_or_with_a_bom_keeps_headers_body_and_attachments(tmp_path, codec, bom):
    sources = [shared("formats", "fake-email.eml"), write_eml(tmp_path / "src.eml")]
    for i, src in enumerate(sources):
        path = tmp_path / f"{codec}-{len(bom)}-{i}.eml"
        path.write_bytes(bom + src.read_bytes().decode("utf-8").encode(codec))
        doc, plain = parse_file(str(path)), parse_file(str(src))
        assert (doc.text, doc.metadata, doc.title) == (plain.text, plain.metadata, plain.title)
    assert "Violets are blue" in parse_file(str(tmp_path / f"{codec}-{len(bom)}-0.eml")).text
    with_attachment = parse_file(str(tmp_path / f"{codec}-{len(bom)}-1.eml"))
    assert with_attachment.metadata["from_address"] == "ada@example.org"
    assert any(h.title.startswith("Attachment: ") for h in with_attachment.headings)


def test_mail_in_legacy_charsets_is_decoded_by_what_it_declares_or_detects(tmp_path):
    raw = (
        "From: =?iso-8859-1?q?Ren=E9e?= <renee@example.org>\n"
        "To: team@example.org\n"
        "Subject: Caf\u00e9 cr\u00e8me\n"  # raw 8-bit header, no RFC 2047: decoded by the body's charset
        "MIME-Version: 1.0\n"
        "Content-Type: text/plain; charset=windows-1252\n"
        "Content-Transfer-Encoding: 8bit\n\n"
        "Le caf\u00e9 co\u00fbte 3 \u20ac ce matin. Les cr\u00eapes de la soci\u00e9t\u00e9 sont d\u00e9j\u00e0 "
        "pr\u00eates, et l'\u00e9quipe p\u00e2tisserie r\u00e9p\u00e8te qu'il faut \u00eatre \u00e0 l'heure.\n"
    ).encode("cp1252")
    (tmp_path / "cp1252.eml").write_bytes(raw)
    doc = parse_file(str(tmp_path / "cp1252.eml"))
    assert doc.metadata["from"] == "Renée <renee@example.org>" and doc.metadata["subject"] == "Café crème"
    assert "Le café coûte 3 € ce matin." in doc.text and "\ufffd" not in doc.text
    # a charset Python does not know, or one the bytes do not match: decoded by detection, never
    # left as replacement characters (which single-byte code page is a guess on short texts)
    for declared in (b"charset=x-unknown-8bit", b"charset=utf-8"):
        (tmp_path / "odd.eml").write_bytes(raw.replace(b"charset=windows-1252", declared))
        text = parse_file(str(tmp_path / "odd.eml")).text
        assert "Le caf" in text and "ce matin" in text and "\ufffd" not in text


def test_a_blank_mail_file_is_empty_not_broken(tmp_path):
    (tmp_path / "blank.eml").write_bytes(b"      \n\n    \n")
    assert parse_file(str(tmp_path / "blank.eml")).text == ""


def test_mbox_messages_are_sections(tmp_path):
    one = bytes(write_eml(tmp_path / "a.eml", attach=False).read_bytes())
    two = one.replace(b"Analytical engine notes", b"Second letter").replace(b"Jacquard", b"Difference")
    box = tmp_path / "inbox.mbox"
    box.write_bytes(
        b"From ada@example.org Tue Dec 10 10:00:00 1843\n"
        + one
        + b"\n"
        + b"From ada@example.org Wed Dec 11 10:00:00 1843\n"
        + two
        + b"\n"
    )
    doc = parse_file(str(box))
    assert [h.title for h in doc.headings] == ["Analytical engine notes", "Second letter"]
    assert doc.metadata["messages"] == "2"


def test_epub_chapters_follow_the_spine(tmp_path):
    doc = parse_file(str(write_epub(tmp_path / "almanac.epub")))
    assert doc.title == "A Tiny Almanac" and doc.metadata["author"] == "Test Author"
    assert doc.text.index("Telemark") < doc.text.index("Crocus")
    assert [h.title for h in doc.headings] == ["Winter", "Spring"]


def test_shared_epub():
    doc = parse_file(str(shared("formats", "winter-sports.epub")))
    assert doc.title == "Winter Sports in Switzerland" and "telemark" in doc.text.lower()
    assert len(doc.headings) > 10


def test_odt_headings(tmp_path):
    doc = parse_file(str(write_odt(tmp_path / "log.odt")))
    assert [(h.level, h.title) for h in doc.headings] == [(1, "Harbour logbook"), (2, "Cargo")]
    assert doc.text[doc.headings[1].offset :].startswith("Cargo\n\nBarrels of saffron.")


def test_shared_odt_and_rtf():
    assert "Parrots" in parse_file(str(shared("formats", "simple.odt"))).text
    rtf = parse_file(str(shared("formats", "fake-doc.rtf"))).text
    assert "My First Heading" in rtf and "Row 1, Cell 1" in rtf


@pytest.mark.parametrize(
    "name,data,expected",
    [
        (
            "user.json",
            b'{"user": {"name": "Ana", "address": {"city": "Paris"}}, "tags": ["a", "b"]}',
            "user.address.city: Paris",
        ),
        ("list.json", b'[{"id": 1, "items": [{"sku": "X9"}]}]', "[0].items[0].sku: X9"),
        ("conf.yaml", b"server:\n  port: 8080\n  hosts: [alpha, beta]\n", "server.hosts: alpha, beta"),
        (
            "feed.xml",
            b'<?xml version="1.0"?><rss><channel><item id="7"><title>Dune</title></item></channel></rss>',
            "rss.channel.item.title: Dune",
        ),
    ],
)
def test_structured_text_keeps_key_paths(tmp_path, name, data, expected):
    path = tmp_path / name
    path.write_bytes(data)
    assert expected in parse_file(str(path)).text.split("\n")


def test_ndjson_records_and_yaml_documents_are_sections(tmp_path):
    (tmp_path / "r.ndjson").write_text('{"a": 1}\n{"a": 2, "b": {"c": "deep"}}\n')
    doc = parse_file(str(tmp_path / "r.ndjson"))
    assert [h.title for h in doc.headings] == ["Record 1", "Record 2"] and "b.c: deep" in doc.text
    (tmp_path / "multi.yaml").write_text("a: 1\n---\nb: 2\n")
    assert [h.title for h in parse_file(str(tmp_path / "multi.yaml")).headings] == ["Document 1", "Document 2"]


def test_shared_yaml():
    assert "xmas-fifth-day.partridges.location: a pear tree" in parse_file(str(shared("formats", "simple.yaml"))).text


def test_notebook_cells_are_sections(tmp_path):
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": ["# Loading data\n", "We read the file."]},
            {"cell_type": "code", "source": "df = load('sales.csv')"},
        ],
        "nbformat": 4,
    }
    (tmp_path / "a.ipynb").write_text(json.dumps(nb))
    doc = parse_file(str(tmp_path / "a.ipynb"))
    assert [h.title for h in doc.headings] == ["Loading data", "Cell 2 (code)"] and doc.title == "Loading data"


@pytest.mark.parametrize(
    "name,text,expected",
    [
        (
            "notes.org",
            "#+TITLE: Garden\n* TODO Plant beans :veg:\nsoon\n** Water\n#+BEGIN_SRC sh\n* not a heading\n#+END_SRC\n",
            [(1, "Plant beans"), (2, "Water")],
        ),
        (
            "guide.adoc",
            "= User Guide\n\n== Install\ntext\n----\n== not a heading\n----\n=== Linux\n",
            [(1, "User Guide"), (2, "Install"), (3, "Linux")],
        ),
    ],
)
def test_org_and_asciidoc_headings(tmp_path, name, text, expected):
    (tmp_path / name).write_text(text)
    doc = parse_file(str(tmp_path / name))
    assert [(h.level, h.title) for h in doc.headings] == expected
    assert all(
        doc.text[h.offset :].lstrip("*= ").startswith(h.title.split()[0]) or h.title in doc.text for h in doc.headings
    )


def test_code_top_level_definitions(tmp_path):
    (tmp_path / "m.py").write_text("import os\n\n\n@cache\ndef load(path):\n    return 1\n\n\nclass Store:\n    pass\n")
    doc = parse_file(str(tmp_path / "m.py"))
    assert [h.title for h in doc.headings] == ["def load", "class Store"]
    assert doc.text[doc.headings[0].offset :].startswith("@cache")
    (tmp_path / "main.go").write_text("package main\n\n// Run starts it.\nfunc Run() {\n}\n\ntype Server struct {}\n")
    go = parse_file(str(tmp_path / "main.go"))
    assert [h.title for h in go.headings] == ["func Run()", "type Server struct {}"]
    assert go.text[go.headings[0].offset :].startswith("// Run starts it.")


def test_unknown_extensions_are_sniffed(tmp_path):
    (tmp_path / "README").write_text("# Project\n\nSome words.\n\n## Usage\n\n- run it\n")
    (tmp_path / "notes.dat").write_text("plain words in a data file\n")
    (tmp_path / "blob.dat").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "deck").write_bytes(write_pptx(tmp_path / "x.pptx").read_bytes())
    (tmp_path / "mail").write_bytes(write_eml(tmp_path / "y.eml").read_bytes())
    assert detect_type(str(tmp_path / "README")) == "md"
    assert detect_type(str(tmp_path / "notes.dat")) == "txt"
    assert detect_type(str(tmp_path / "blob.dat")) == ""
    assert detect_type(str(tmp_path / "deck")) == "pptx"
    assert detect_type(str(tmp_path / "mail")) == "eml"
    assert [h.title for h in parse_file(str(tmp_path / "README"), "md").headings] == ["Project", "Usage"]


def test_binary_under_a_text_name_is_still_reported(tmp_path):
    (tmp_path / "notes.txt").write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(ParseError, match="binary"):
        parse_file(str(tmp_path / "notes.txt"))


_ZIP_JUNK = io.BytesIO()
with zipfile.ZipFile(_ZIP_JUNK, "w") as _zf:
    _zf.writestr("hello.txt", "not an office document")


@pytest.mark.parametrize(
    "name,data,message",
    [
        ("bad.pptx", b"PK\x03\x04 truncated", "corrupt PPTX"),
        ("zip.pptx", _ZIP_JUNK.getvalue(), "corrupt PPTX"),
        ("bad.xlsx", b"PK\x03\x04 truncated", "corrupt XLSX"),
        ("bad.xls", b"\xd0\xcf\x11\xe0 nonsense", "corrupt XLS"),
        ("bad.ods", b"not a zip", "corrupt ODS"),
        ("bad.odt", b"not a zip", "corrupt ODT"),
        ("bad.epub", b"not a zip", "corrupt EPUB"),
        ("bad.rtf", b"plain text pretending", "corrupt RTF"),
        ("bad.msg", b"\xd0\xcf\x11\xe0 nonsense", "corrupt MSG"),
        ("bad.eml", b"\n\njust a body, no headers", "not an email message"),
        ("bad.mbox", b"no separator line", "not an mbox"),
        ("bad.json", b'{"a": ', "invalid JSON"),
        ("bad.ndjson", b'{"a": 1}\n{oops\n', "invalid NDJSON at line 2"),
        ("bad.yaml", b"a: [1, 2\n", "invalid YAML"),
        ("bad.xml", b"<a><b></a>", "invalid XML"),
        ("bad.ipynb", b'{"nope": 1}', "invalid notebook"),
        ("bad.png", b"\x89PNG\r\n\x1a\n broken", "not a readable image"),
        ("bad.csv", bytes(range(1, 32)) * 20, "binary"),
    ],
)
def test_corrupt_file_of_each_family_is_a_named_failure(tmp_path, name, data, message):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ParseError, match=message):
        parse_file(str(tmp_path / name))


def test_scanned_pdf_without_ocr_is_a_named_failure():
    with pytest.raises(ParseError, match=r"no text layer \(1 page\)"):
        parse_file(str(shared("scanned", "loremipsum-flat.pdf")), ocr=False)


def test_image_without_ocr_is_a_named_failure(tmp_path):
    from PIL import Image

    Image.new("RGB", (20, 20), "white").save(tmp_path / "a.png")
    with pytest.raises(ParseError, match="OCR"):
        parse_file(str(tmp_path / "a.png"), ocr=False)


def test_quarry_formats_lists_every_format(cli):
    done = cli("formats", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {r["type"] for r in out["formats"]} == {f.name for f in FORMATS.values()}
    # everything but what needs a system program (LibreOffice for DOC and PPT) installs with quarry
    assert all(r["readable"] for r in out["formats"] if not r["programs"])
    assert {r["type"]: list(r["programs"]) for r in out["formats"] if r["programs"]} == {
        "doc": ["soffice"],
        "ppt": ["soffice"],
    }
    assert out["ocr_engine"] == "rapidocr"


def _box(x0, x1, y, text):
    return [[x0, y], [x1, y], [x1, y + 20], [x0, y + 20]], text, 0.9


def test_ocr_lines_read_two_columns_one_after_the_other():
    from quarry.ingest.parsers.ocr import _lines

    title = [_box(0, 1000, 0, "A Title Across Both Columns")]
    left = [_box(0, 450, 40 + 30 * i, f"left{i}") for i in range(4)]
    right = [_box(550, 1000, 40 + 30 * i, f"right{i}") for i in range(4)]
    text = _lines(title + right + left)
    assert text.split("\n") == [
        "A Title Across Both Columns",
        *(f"left{i}" for i in range(4)),
        *(f"right{i}" for i in range(4)),
    ]
    # One column of lines, two boxes on a line: joined left to right.
    single = [_box(0, 400, 30 * i, f"a{i}") for i in range(6)] + [_box(410, 1000, 30 * i, f"b{i}") for i in range(6)]
    assert _lines(single).split("\n")[0] == "a0 b0"


# --- OCR (slow) --------------------------------------------------------------------------------


def _text_image(words: str, size=(900, 140)):
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((20, 40), words, fill="black", font=ImageFont.load_default(size=44))
    return image


@pytest.mark.slow
def test_scanned_pdf_is_read_by_ocr_with_its_page():
    doc = parse_file(str(shared("scanned", "loremipsum-flat.pdf")))
    assert doc.ocr_pages == 1 and doc.page_offsets == [0] and doc.ocr_seconds > 0 and doc.ocr_page_numbers == [1]
    assert "lorem" in doc.text.lower() and "consequat" in doc.text.lower()


@pytest.mark.slow
def test_multipage_tiff_frames_are_pages(tmp_path):
    first, second = _text_image("HARBOUR LIGHTS"), _text_image("COPPER KETTLE")
    first.save(tmp_path / "scan.tiff", save_all=True, append_images=[second])
    doc = parse_file(str(tmp_path / "scan.tiff"))
    assert doc.ocr_pages == 2 and len(doc.page_offsets) == 2 and doc.ocr_page_numbers == [1, 2]
    assert "HARBOUR" in doc.text.upper() and doc.page_at(doc.text.upper().index("KETTLE")) == 2


# --- the real flow on a mixed tree ----------------------------------------------------------------


def test_mixed_tree_through_the_flow(tmp_path, run_flow):
    tree = mixed_tree(tmp_path / "tree")
    (tree / "scan.pdf").write_bytes(shared("scanned", "loremipsum-flat.pdf").read_bytes())
    db = tmp_path / "db"
    report = run_flow([tree], db, overrides={"ocr": False})
    errors = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in report["errors"]}
    assert errors["old.doc"].startswith(
        (
            "LibreOffice could not convert this legacy Word file",  # damaged
            "legacy Word needs LibreOffice, which is not installed",
        )
    )
    assert (
        errors
        == {
            "old.doc": errors["old.doc"],
            "scan.pdf": "no text layer (1 page): scanned or image-only PDF, and OCR read no text from it (or is off)",
            "broken.xlsx": errors["broken.xlsx"],
        }
        and "corrupt XLSX" in errors["broken.xlsx"]
    )
    assert report["unsupported"] == 0 and report["added"] == 12 and report["ocr_pages"] == 0
    expected = {
        "widget-7 Lyon": "stock.xlsx",
        "okapi shipment": "deck.pptx",
        "Jacquard loom": "note.eml",
        "Bernoulli numbers": "note.eml",
        "Telemark skiers": "almanac.epub",
        "saffron": "log.odt",
        "Puffin": "birds.ods",
        "Trondheim": "villes.csv",
        "bluefin": "conf.yaml",
        "Valparaiso": "user.json",
        "Quokka census": "doc.rtf",
        "Lighthouse keeper": "README",
        "gravitate pelican": "tool.py",
    }
    with quarry.open(db) as idx:
        for query, name in expected.items():
            hits = idx.search(query, k=3, mode="bm25").results
            assert hits and hits[0].path.endswith(name), (query, [h.path for h in hits])
        slide = idx.search("Zanzibar", k=1, mode="bm25").results[0]
        assert slide.path.endswith("deck.pptx") and slide.page_start == 2
        mail = idx.search("engine", k=5, mode="bm25", filters="metadata.from_address = 'ada@example.org'").results
        assert mail and all(h.path.endswith("note.eml") for h in mail)
    again = run_flow([tree], db, overrides={"ocr": False})
    assert again["added"] == again["updated"] == 0 and again["embedded_chunks"] == 0


@pytest.mark.slow
def test_ocr_is_counted_in_the_run(tmp_path, run_flow, cli):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "scan.pdf").write_bytes(shared("scanned", "loremipsum-flat.pdf").read_bytes())
    report = run_flow([tree], tmp_path / "db")
    assert report["failed"] == 0 and report["ocr_pages"] == 1 and report["ocr_seconds"] > 0
    runs = json.loads(cli("runs", "--db", tmp_path / "db", "--json").stdout)
    assert runs[0]["ocr_pages"] == 1 and runs[0]["ocr_seconds"] > 0
    with quarry.open(tmp_path / "db") as idx:
        hit = idx.search("sollicitudin molestie consequat", k=1, mode="bm25").results[0]
    assert hit.path.endswith("scan.pdf") and hit.page_start == 1
    with quarry.open(tmp_path / "db") as idx:
        doc = idx.document(hit.doc_id)
    assert doc["ocr_page_numbers"] == [1] and doc["page_offsets"] == [0] and doc["warnings"] == []
