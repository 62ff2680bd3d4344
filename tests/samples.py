"""Sample files of the issue-15 formats, written with each format's own writer library.

Shared by tests/test_formats.py and bench/formats.py; imports nothing from the test setup.
"""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path


def write_xlsx(path: Path, rows: int = 300) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Inventory"
    sheet.append(["Part", "Warehouse", "Quantity"])
    for i in range(rows):
        sheet.append([f"widget-{i}", "Lyon" if i % 2 else "Porto", i])
    other = book.create_sheet("Suppliers")
    other.append(["Supplier", "Country"])
    other.append(["Quillfeather Ltd", "Iceland"])
    book.save(path)
    return path


def write_pptx(path: Path) -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    s1 = deck.slides.add_slide(deck.slide_layouts[1])
    s1.shapes.title.text = "Quarterly heliotrope review"
    s1.placeholders[1].text = "Revenue from marmalade grew"
    s2 = deck.slides.add_slide(deck.slide_layouts[5])
    s2.shapes.title.text = "Regional table"
    table = s2.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for (r, c), value in {(0, 0): "Region", (0, 1): "Units", (1, 0): "Zanzibar", (1, 1): "42"}.items():
        table.cell(r, c).text = value
    s2.notes_slide.notes_text_frame.text = "Mention the okapi shipment"
    deck.save(path)
    return path


def write_eml(path: Path, attach: bool = True) -> Path:
    msg = EmailMessage()
    msg["From"] = "Ada Lovelace <Ada@Example.org>"
    msg["To"] = "Charles Babbage <charles@example.org>"
    msg["Cc"] = "team@example.org"
    msg["Subject"] = "Analytical engine notes"
    msg["Date"] = "Tue, 10 Dec 1843 10:00:00 +0000"
    msg["Message-ID"] = "<note-g@example.org>"
    msg.set_content("The engine weaves algebraic patterns like a Jacquard loom.")
    msg.add_alternative("<p>HTML body that should not win over the plain text</p>", subtype="html")
    if attach:
        msg.add_attachment(b"name,role\nBernoulli,numbers\n", maintype="text", subtype="csv", filename="table.csv")
        msg.add_attachment(b"\x00\x01binary", maintype="application", subtype="octet-stream", filename="blob.bin")
    path.write_bytes(bytes(msg))
    return path


def write_epub(path: Path) -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("quarry-test")
    book.set_title("A Tiny Almanac")
    book.add_author("Test Author")
    c1 = epub.EpubHtml(title="Spring", file_name="a_spring.xhtml")
    c1.content = "<html><body><h1>Spring</h1><p>Crocus bulbs wake first.</p></body></html>"
    c2 = epub.EpubHtml(title="Winter", file_name="b_winter.xhtml")
    c2.content = "<html><body><p>Telemark skiers descend.</p></body></html>"  # no heading: TOC names it
    for c in (c1, c2):
        book.add_item(c)
    book.toc = [c2, c1]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = [c2, c1]  # spine order, not file order, is reading order
    epub.write_epub(str(path), book)
    return path


def write_odt(path: Path) -> Path:
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    doc = OpenDocumentText()
    doc.text.addElement(H(outlinelevel=1, text="Harbour logbook"))
    doc.text.addElement(P(text="Tides were unusually gentle."))
    doc.text.addElement(H(outlinelevel=2, text="Cargo"))
    doc.text.addElement(P(text="Barrels of saffron."))
    doc.save(str(path))
    return path


def write_ods(path: Path) -> Path:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    doc = OpenDocumentSpreadsheet()
    table = Table(name="Birds")
    for row in (["Species", "Count"], ["Puffin", "12"], ["Gannet", "7"]):
        tr = TableRow()
        for value in row:
            cell = TableCell()
            cell.addElement(P(text=value))
            tr.addElement(cell)
        table.addElement(tr)
    doc.spreadsheet.addElement(table)
    doc.save(str(path))
    return path


def mixed_tree(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_xlsx(root / "stock.xlsx", rows=40)
    write_pptx(root / "deck.pptx")
    write_eml(root / "note.eml")
    write_epub(root / "almanac.epub")
    write_odt(root / "log.odt")
    write_ods(root / "birds.ods")
    (root / "villes.csv").write_text("Ville,Pays\nTrondheim,Norway\n")
    (root / "conf.yaml").write_text("server:\n  codename: bluefin\n")
    (root / "user.json").write_text('{"user": {"city": "Valparaiso"}}')
    (root / "doc.rtf").write_text(r"{\rtf1\ansi Quokka census results\par}")
    (root / "README").write_text("# Lighthouse keeper\n\nNo extension, still read.\n")
    (root / "tool.py").write_text("def gravitate():\n    return 'pelican'\n")
    (root / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100)
    (root / "broken.xlsx").write_bytes(b"PK\x03\x04 truncated")
    return root
