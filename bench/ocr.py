"""OCR quality (character error rate) and cost (seconds per page) on real pages with known text.

    python bench/ocr.py            # the scanned page and 3 rendered pages
    python bench/ocr.py --pages 1  # only the scanned page

Pages:
- ``scanned/loremipsum-flat.pdf``: a real scan with no text layer; the reference is a human
  transcription of the page image (bench/ocr_reference/loremipsum-flat.txt).
- page 1 of ``pdf/levels_of_agi.pdf``, ``formats/fake-memo.pdf`` and ``formats/multi-column-2p.pdf``,
  rendered at the OCR resolution as a clean "scan"; the reference is the PDF's own text layer
  (pypdfium2). Layout differences (columns, footnotes) count against OCR here, so this CER is
  an upper bound.

CER = edit distance / reference length on text with whitespace collapsed to single spaces;
``cer_nospace`` ignores whitespace (the recogniser sometimes glues words together, which
BM25 notices but a reader does not). Seconds are wall time for render + OCR, engine loaded.
Writes bench/results/ocr.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from common import ROOT

HERE = str(ROOT / "bench")
DATA = os.path.join(os.path.dirname(HERE), "..", "shared", "data")
RESULTS = os.path.join(HERE, "results", "ocr.json")
RENDERED = [("pdf", "levels_of_agi.pdf"), ("formats", "fake-memo.pdf"), ("formats", "multi-column-2p.pdf")]


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, two rows at a time."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cer(ref: str, hyp: str, spaces: bool = True) -> float:
    norm = (lambda s: " ".join(s.split())) if spaces else (lambda s: "".join(s.split()))
    ref, hyp = norm(ref), norm(hyp)
    return edit_distance(ref, hyp) / max(1, len(ref))


def pages(limit: int):
    import pypdfium2 as pdfium

    scanned = os.path.join(DATA, "scanned", "loremipsum-flat.pdf")
    with open(os.path.join(HERE, "ocr_reference", "loremipsum-flat.txt"), encoding="utf-8") as f:
        yield "scanned/loremipsum-flat.pdf p1 (real scan)", scanned, 0, f.read()
    for folder, name in RENDERED[: max(0, limit - 1)]:
        path = os.path.join(DATA, folder, name)
        pdf = pdfium.PdfDocument(path)
        ref = pdf[0].get_textpage().get_text_range()
        pdf.close()
        yield f"{folder}/{name} p1 (rendered)", path, 0, ref


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=4, help="how many pages of the set (the scan first)")
    args = parser.parse_args()

    import pypdfium2 as pdfium

    from quarry.ingest.parsers.ocr import DPI, _rapidocr, engine_name, ocr_image

    t = time.perf_counter()
    _rapidocr()
    load = time.perf_counter() - t
    rows = []
    for label, path, index, ref in pages(args.pages):
        t = time.perf_counter()
        pdf = pdfium.PdfDocument(path)
        image = pdf[index].render(scale=DPI / 72).to_pil()
        pdf.close()
        hyp = ocr_image(image)
        seconds = time.perf_counter() - t
        rows.append(
            {
                "page": label,
                "ref_chars": len(" ".join(ref.split())),
                "cer": round(cer(ref, hyp), 4),
                "cer_nospace": round(cer(ref, hyp, spaces=False), 4),
                "seconds": round(seconds, 1),
            }
        )
        print(
            f"{label:<48} {rows[-1]['ref_chars']:>6} {rows[-1]['cer']:>7.2%} {rows[-1]['cer_nospace']:>7.2%} "
            f"{seconds:>7.1f}",
            file=sys.stderr,
        )
    report = {
        "engine": engine_name(),
        "dpi": DPI,
        "engine_load_s": round(load, 2),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "pages": rows,
        "mean_seconds_per_page": round(sum(r["seconds"] for r in rows) / len(rows), 1),
    }
    print("\n| page | ref chars | CER | CER (no spaces) | s/page |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['page']} | {r['ref_chars']} | {r['cer']:.2%} | {r['cer_nospace']:.2%} | {r['seconds']} |")
    print(
        f"\nengine {report['engine']} at {DPI} dpi, loaded in {load:.1f} s; {report['cpus']} CPUs, "
        f"load average {report['load_avg_1m']} while measuring"
    )
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
