"""What reading a PDF's layout costs on top of its text, and what it finds.

    python bench/pdf_layout.py [PDF ...]      # ../shared/data/pdf and formats PDFs, plus any given

For each PDF: pages, the whole parse (pypdf text, running lines, rows, layout, tables; OCR off) in
seconds a page, and of that the layout's part (pypdfium2 lines, font headings, page titles, table
titles, heading placement) measured again on its own; then what the layout found: headings
(outline or font), pages with a title, tables and those with a title and column headers.
Prints a table and writes bench/results/pdf_layout.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import ROOT, SHARED

HERE = ROOT / "bench"
DATA = SHARED
RESULTS = HERE / "results" / "pdf_layout.json"


def layout_seconds(data: bytes, doc) -> float:
    """The layout's part of a parse, timed alone on the parsed document's pages."""
    from quarry.ingest.parsers.pdf import _placed, _tables
    from quarry.ingest.parsers.pdf_layout import body_size, font_headings, page_titles, read_lines

    started = time.perf_counter()
    lines = read_lines(data)
    if lines:
        body = body_size(lines)
        found, titles = font_headings(lines, body), page_titles(lines, body)
        ends = doc.page_offsets[1:] + [len(doc.text)]
        pages = [doc.text[a:b] for a, b in zip(doc.page_offsets, ends)]
        _tables(pages, doc.page_offsets, lines, titles)
        _placed(found, doc.text, doc.page_offsets)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdfs", nargs="*", help="more PDFs to measure")
    args = ap.parse_args(argv)
    from quarry.ingest.parsers import parse_file

    files = sorted(DATA.glob("pdf/*.pdf")) + sorted(p for p in DATA.glob("formats/*.pdf") if p.name != "password.pdf")
    files += [Path(p) for p in args.pdfs]
    if not files:
        print(f"no PDFs: {DATA} is absent and none were given")
        return 1
    rows = []
    print(
        f"{'file':42} {'pages':>5} {'s/page':>7} {'layout':>7} {'headings':>8} {'titled':>6} {'tables':>6} "
        f"{'t+title':>7} {'t+cols':>6}"
    )
    for path in files:
        started = time.perf_counter()
        doc = parse_file(str(path), ocr=False)
        seconds = time.perf_counter() - started
        layout = layout_seconds(path.read_bytes(), doc)
        n = len(doc.page_offsets) or 1
        row = {
            "file": path.name,
            "pages": n,
            "seconds_per_page": seconds / n,
            "layout_seconds_per_page": layout / n,
            "headings": len(doc.headings),
            "titled_pages": sum(1 for t in doc.page_titles if t),
            "tables": len(doc.tables),
            "tables_titled": sum(1 for t in doc.tables if t.title),
            "tables_with_columns": sum(1 for t in doc.tables if t.columns),
        }
        rows.append(row)
        print(
            f"{path.name[:42]:42} {n:5} {row['seconds_per_page']:7.4f} {row['layout_seconds_per_page']:7.4f} "
            f"{row['headings']:8} {row['titled_pages']:6} {row['tables']:6} {row['tables_titled']:7} "
            f"{row['tables_with_columns']:6}"
        )
    pages = sum(r["pages"] for r in rows)
    total = sum(r["seconds_per_page"] * r["pages"] for r in rows)
    layout = sum(r["layout_seconds_per_page"] * r["pages"] for r in rows)
    summary = {
        "pages": pages,
        "seconds_per_page": total / pages,
        "layout_seconds_per_page": layout / pages,
        "layout_share_of_the_rest": layout / max(1e-9, total - layout),
    }
    print(
        f"{'all':42} {pages:5} {summary['seconds_per_page']:7.4f} {summary['layout_seconds_per_page']:7.4f}  "
        f"(layout {100 * summary['layout_share_of_the_rest']:.0f}% over the rest of the parse)"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"files": rows, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
