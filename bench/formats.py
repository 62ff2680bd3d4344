"""A mixed tree of every format through the real CLI: what is indexed, what fails (and why),
what each format costs, and whether search finds each format's own words.

    python bench/formats.py              # ../shared/data/formats + scanned + generated samples x3
    python bench/formats.py --copies 10 --no-ocr

The tree: the real files of ../shared/data/formats and ../shared/data/scanned, plus ``--copies``
sets of the samples tests/samples.py writes with each format's writer library (XLSX, PPTX, EML,
EPUB, ODT, ODS, CSV, YAML, JSON, RTF, code, an extension-less README, a legacy DOC, a corrupt
XLSX). Writes bench/results/formats.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
RESULTS = HERE / "results" / "formats.json"
QUERIES = {  # words only that file holds -> the file
    "Tangerine Aqua Purple": "fake-power-point-table.pptx", "Maple Leafs TOR": "stanley-cups.xlsx",
    "Violets are blue roses": "fake-email.eml", "telemark turn": "winter-sports.epub",
    "favorite things parrots hockey": "simple.odt", "first paragraph heading": "fake-doc.rtf",
    "partridges pear tree": "simple.yaml", "lorem ipsum dolor": "loremipsum-flat.pdf",
    "okapi shipment": "deck.pptx", "Jacquard loom": "note.eml", "Puffin Gannet": "birds.ods",
    "Quokka census": "doc.rtf", "Lighthouse keeper": "README", "gravitate pelican": "tool.py",
    "bluefin codename": "conf.yaml", "Valparaiso": "user.json", "Trondheim Norway": "villes.csv",
}


def quarry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quarry.cli.main", *args], capture_output=True, text=True, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=3, help="sets of generated samples")
    parser.add_argument("--no-ocr", action="store_true")
    args = parser.parse_args()

    from quarry.ingest.discover import discover
    from tests.samples import mixed_tree

    work = Path(tempfile.mkdtemp(prefix="quarry-bench-formats-"))
    try:
        tree = work / "tree"
        for folder in ("formats", "scanned"):
            shutil.copytree(DATA / folder, tree / folder, dirs_exist_ok=True)
        for i in range(args.copies):
            mixed_tree(tree / f"set{i}")
        readable, unsupported = discover([tree])
        types = Counter(f.file_type for f in readable)
        t = time.perf_counter()
        done = quarry("index", str(tree), "--db", str(work / "db"), "--json", *(["--no-ocr"] if args.no_ocr else []))
        seconds = time.perf_counter() - t
        if done.returncode not in (0, 3):
            sys.exit(f"index exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        report = json.loads(done.stdout)
        found = {}
        for query, name in QUERIES.items():
            out = json.loads(quarry("search", query, "--db", str(work / "db"), "--mode", "bm25", "--json",
                                    "-k", "5").stdout)["results"]
            hit = next((r for r in out if r["path"].endswith("/" + name)), None)
            found[name] = {"query": query, "found": hit is not None, "rank": hit["rank"] if hit else None,
                           "page_start": hit["page_start"] if hit else None}
        errors = Counter(e["error"].split(":")[0] for e in report["errors"])
        result = {"files": len(readable) + len(unsupported), "by_type": dict(types), "unsupported": len(unsupported),
                  "added": report["added"], "failed": report["failed"], "failures": dict(errors),
                  "chunks": report["chunks"], "ocr_pages": report["ocr_pages"], "ocr_seconds": report["ocr_seconds"],
                  "index_seconds": round(seconds, 1), "durations": report["durations"], "search": found}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"{result['files']} files: {result['added']} indexed, {result['failed']} failed, "
          f"{result['unsupported']} unsupported; {result['chunks']} chunks; OCR {result['ocr_pages']} pages in "
          f"{result['ocr_seconds']:.1f} s; index {result['index_seconds']} s\n")
    print("| type | files |\n|---|---|")
    for kind, n in sorted(types.items()):
        print(f"| {kind} | {n} |")
    print("\n| failure | files |\n|---|---|")
    for cause, n in errors.most_common():
        print(f"| {cause} | {n} |")
    print("\n| file | query | found at rank | page |\n|---|---|---|---|")
    for name, f in found.items():
        print(f"| {name} | {f['query']} | {f['rank'] or 'NOT FOUND'} | {f['page_start'] or ''} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
