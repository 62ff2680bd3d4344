"""What reading a PDF's layout costs on top of its text, where a page's parse time goes, and pages
a second with and without the layout, one process and a pool.

    python bench/pdf_layout.py [PDF ...] [--pool 2] [--json]   # ../shared/data PDFs, plus any given
    python bench/pdf_layout.py PDF... --pool 2 --lone-only        # the lone-file table alone

For each PDF: pages, the whole parse (pypdf text, running lines, rows, layout, tables; OCR off) in
seconds a page, split into pypdf's text extraction and the layout's part (pypdfium2 lines, font
headings, page titles, table titles, heading placement), each timed again on its own, and the rest;
then what the layout found: headings (outline or font), pages with a title, tables and those with
a title and column headers. Then every PDF parsed in a pool of ``--pool`` processes (spawned, as
quarry's parse pool is), with the layout read and without it (pypdfium2 not asked: what a
pypdf-only parser does), alternated and the best of ``--rounds`` kept: pages a second on this
machine's cores. Then the lone file: each given PDF of ``pdf.SPLIT_MIN_PAGES`` pages or more parsed
alone through ``quarry.ingest.process.parse_files`` with ``--pool`` workers, as a run's batch that
holds one heavy file parses it: its pages read by one process (``page_workers=1``) and by the spare
ones too (the default), alternated, the best of ``--rounds`` kept, pool start included. Prints
tables and writes bench/results/pdf_layout.json (with the CPU flags and the load).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from common import RESULTS, SHARED, load_avg, log, machine, table, write_json

DATA = SHARED


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
        pages = [doc.text[a:b] for a, b in zip(doc.page_offsets, ends, strict=True)]
        _tables(pages, doc.page_offsets, lines, titles)
        _placed(found, doc.text, doc.page_offsets)
    return time.perf_counter() - started


def text_seconds(data: bytes) -> float:
    """pypdf's part: open the file and extract every page's text, as the parser does."""
    import io

    from pypdf import PdfReader

    from quarry.ingest.parsers.pdf import _page_text

    started = time.perf_counter()
    reader = PdfReader(io.BytesIO(data), strict=False)
    for page in reader.pages:
        try:
            _page_text(page)
        except Exception:
            pass
    return time.perf_counter() - started


def parse_pages(path: str, layout: bool) -> int:
    """In a pool worker: parse ``path`` (OCR off), without pypdfium2's lines unless ``layout``;
    returns its pages."""
    from quarry.ingest.parsers import parse_file, pdf

    if not layout:
        pdf.read_lines = lambda data, password=None: None  # this worker only: the pypdf-only parse
    return len(parse_file(path, ocr=False).page_offsets) or 1


def pool_rate(files: list[Path], workers: int, layout: bool) -> tuple[int, float]:
    """Pages and wall seconds of parsing every file in a new pool of ``workers`` spawned processes
    (their start included, as a run pays it)."""
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        # the longest first, as a pool should be fed
        order = sorted(files, key=lambda p: -p.stat().st_size)
        pages = sum(pool.map(parse_pages, [str(p) for p in order], [layout] * len(order)))
    return pages, time.perf_counter() - started


def lone_rate(path: Path, workers: int, page_workers: int | None) -> tuple[int, float, dict]:
    """Pages, wall seconds and the document of parsing ``path`` alone (OCR off) through
    ``parse_files`` with ``workers``: a new parse pool, as a run's batch starts one."""
    from dataclasses import asdict

    from quarry.core.models import FileInfo
    from quarry.ingest.process import parse_files

    stat = path.stat()
    file = FileInfo(str(path.resolve()), str(path.parent), path.name, "pdf", stat.st_size, stat.st_mtime, "")
    started = time.perf_counter()
    (doc,) = parse_files([file], workers=workers, ocr=False, page_workers=page_workers)
    wall = time.perf_counter() - started
    if isinstance(doc, str):
        raise SystemExit(f"{path.name}: {doc}")
    return len(doc.page_offsets) or 1, wall, asdict(doc)


def lone_files(paths: list[Path], workers: int, rounds: int, out) -> list[dict]:
    """Each PDF parsed alone, its pages read by one process and by ``workers`` (see the docstring)."""
    rows = []
    for path in paths:
        best: dict[str, float] = {}
        docs: dict[str, dict] = {}
        pages = 0
        for round_ in range(rounds):
            for kind in ("serial", "split") if round_ % 2 == 0 else ("split", "serial"):
                pages, wall, docs[kind] = lone_rate(path, workers, 1 if kind == "serial" else None)
                log(f"{path.name} alone, {kind}: {pages} pages in {wall:.2f} s (load {load_avg()})")
                best[kind] = min(best.get(kind, wall), wall)
        rows.append(
            {
                "file": path.name,
                "pages": pages,
                "workers": workers,
                "load_average": load_avg(),
                "serial_s": best["serial"],
                "split_s": best["split"],
                "serial_pages_per_s": pages / best["serial"],
                "split_pages_per_s": pages / best["split"],
                "speedup": best["serial"] / best["split"],
                "same_document": docs["serial"] == docs["split"],
            }
        )
    print(
        table(
            ["file alone", "pages", "serial s", "split s", "serial pages/s", "split pages/s", "speed-up", "same"],
            [
                [
                    r["file"][:42],
                    r["pages"],
                    round(r["serial_s"], 2),
                    round(r["split_s"], 2),
                    round(r["serial_pages_per_s"], 1),
                    round(r["split_pages_per_s"], 1),
                    f"{r['speedup']:.2f}x",
                    "yes" if r["same_document"] else "NO",
                ]
                for r in rows
            ],
        ),
        file=out,
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdfs", nargs="*", help="more PDFs to measure")
    ap.add_argument("--pool", type=int, default=2, help="processes of the pool run (0: skip it)")
    ap.add_argument("--rounds", type=int, default=2, help="pool runs of each kind, alternated; the best is kept")
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    ap.add_argument(
        "--lone-only", action="store_true", help="only the lone-file runs of the given PDFs (no profile, no pool run)"
    )
    args = ap.parse_args(argv)
    from quarry.ingest.parsers import parse_file, pdf

    files = sorted(DATA.glob("pdf/*.pdf")) + sorted(p for p in DATA.glob("formats/*.pdf") if p.name != "password.pdf")
    files += [Path(p) for p in args.pdfs]
    if args.lone_only:
        files = [Path(p) for p in args.pdfs]
    if not files:
        print(f"no PDFs: {DATA} is absent and none were given")
        return 1
    out = sys.stderr if args.json else sys.stdout
    if args.lone_only:
        return _lone_only(files, args, out)
    rows = []
    for path in files:
        data = path.read_bytes()
        started = time.perf_counter()
        doc = parse_file(str(path), ocr=False)
        seconds = time.perf_counter() - started
        text = text_seconds(data)
        layout = layout_seconds(data, doc)
        n = len(doc.page_offsets) or 1
        rows.append(
            {
                "file": path.name,
                "pages": n,
                "seconds_per_page": seconds / n,
                "text_seconds_per_page": text / n,
                "layout_seconds_per_page": layout / n,
                "rest_seconds_per_page": max(0.0, seconds - text - layout) / n,
                "headings": len(doc.headings),
                "titled_pages": sum(1 for t in doc.page_titles if t),
                "tables": len(doc.tables),
                "tables_titled": sum(1 for t in doc.tables if t.title),
                "tables_with_columns": sum(1 for t in doc.tables if t.columns),
            }
        )
        log(f"{path.name}: {n} pages, {seconds:.2f} s")
    pages = sum(r["pages"] for r in rows)

    def total(key: str) -> float:
        return sum(r[key] * r["pages"] for r in rows)

    whole, layout = total("seconds_per_page"), total("layout_seconds_per_page")
    summary = {
        "pages": pages,
        "seconds_per_page": whole / pages,
        "text_seconds_per_page": total("text_seconds_per_page") / pages,
        "layout_seconds_per_page": layout / pages,
        "rest_seconds_per_page": total("rest_seconds_per_page") / pages,
        "layout_share_of_the_rest": layout / max(1e-9, whole - layout),
        "pages_per_s_one_process": pages / whole,
        "pages_per_s_one_process_without_layout": pages / max(1e-9, whole - layout),
    }
    columns = ["file", "pages", "s/page", "text", "layout", "rest", "headings", "titled", "tables", "t+title", "t+cols"]
    keys = ["seconds_per_page", "text_seconds_per_page", "layout_seconds_per_page", "rest_seconds_per_page"]
    body = [
        [r["file"][:42], r["pages"]]
        + [round(r[k], 4) for k in keys]
        + [r["headings"], r["titled_pages"], r["tables"], r["tables_titled"], r["tables_with_columns"]]
        for r in rows
    ]
    body.append(["all", pages] + [round(summary[k], 4) for k in keys] + [None] * 5)
    print(table(columns, body), file=out)
    print(
        f"layout {100 * summary['layout_share_of_the_rest']:.0f}% over the rest of the parse; one process: "
        f"{summary['pages_per_s_one_process']:.1f} pages/s, "
        f"{summary['pages_per_s_one_process_without_layout']:.1f} without the layout",
        file=out,
    )
    pool = []
    if args.pool > 0:
        best: dict[bool, tuple[int, float]] = {}
        for round_ in range(args.rounds):
            for with_layout in (True, False) if round_ % 2 == 0 else (False, True):
                got = pool_rate(files, args.pool, with_layout)
                log(f"pool of {args.pool}, layout {with_layout}: {got[0]} pages in {got[1]:.2f} s")
                if with_layout not in best or got[1] < best[with_layout][1]:
                    best[with_layout] = got
        for with_layout in (True, False):
            n, wall = best[with_layout]
            pool.append(
                {"workers": args.pool, "layout": with_layout, "pages": n, "wall_s": wall, "pages_per_s": n / wall}
            )
        print(
            table(
                ["pool", "layout", "pages", "wall s", "pages/s"],
                [
                    [
                        p["workers"],
                        "on" if p["layout"] else "off",
                        p["pages"],
                        round(p["wall_s"], 2),
                        round(p["pages_per_s"], 1),
                    ]
                    for p in pool
                ],
            ),
            file=out,
        )
    lone: dict = {}
    if args.pool > 1:
        long_ones = [Path(p) for p in args.pdfs if _pages(Path(p)) >= pdf.SPLIT_MIN_PAGES]
        lone = {"files": lone_files(long_ones, args.pool, args.rounds, out)}
    result = {"machine": machine(), "files": rows, "summary": summary, "pool": pool, "lone": lone}
    write_json(RESULTS / "pdf_layout.json", result)
    if args.json:
        import json

        print(json.dumps(result, indent=2))
    return 0


def _pages(path: Path) -> int:
    from pypdf import PdfReader

    try:
        return len(PdfReader(path, strict=False).pages)
    except Exception:  # an unreadable or encrypted PDF: not a lone-file case
        return 0


def _lone_only(files: list[Path], args, out) -> int:
    """``--lone-only``: the lone-file rows of the given PDFs, merged by file name into the JSON of an
    earlier run (when there is one), each row with the load it was measured under."""
    import json

    from quarry.ingest.parsers import pdf

    path = RESULTS / "pdf_layout.json"
    result = json.loads(path.read_text()) if path.exists() else {"machine": machine()}
    rows = lone_files([p for p in files if _pages(p) >= pdf.SPLIT_MIN_PAGES], max(2, args.pool), args.rounds, out)
    names = {r["file"] for r in rows}
    kept = [r for r in result.get("lone", {}).get("files", []) if r["file"] not in names]
    result["lone"] = {**result.get("lone", {}), "files": kept + rows}
    write_json(path, result)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
