"""A mixed tree of every format through the real CLI: what is indexed, what fails (and why),
what each format costs, and whether search finds each format's own words.

    python bench/formats.py              # ../shared/data/formats + scanned + generated samples x3
    python bench/formats.py --copies 10 --no-ocr

The tree: the real files of ../shared/data/formats and ../shared/data/scanned, plus ``--copies``
sets of the samples tests/samples.py writes with each format's writer library (XLSX, PPTX, EML,
EPUB, ODT, ODS, CSV, YAML, JSON, RTF, code, an extension-less README, a damaged legacy DOC, a
corrupt XLSX), and the cases of old shares: DOC and PPT written by LibreOffice from the shared
ODT and PPTX (when LibreOffice is installed), the shared EML saved as UTF-16 LE with a BOM and
UTF-16 BE without one, a ZIP and a TAR.GZ of shared files (members found as
``bundle.zip!/...``), and a password-protected XLSX (made with msoffcrypto-tool), which must fail
as "encrypted". Writes bench/results/formats.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import ROOT, SHARED, with_test_helpers

HERE = ROOT / "bench"
DATA = SHARED
RESULTS = HERE / "results" / "formats.json"
QUERIES = [  # (words that file holds, the file: its path ends with this)
    ("Tangerine Aqua Purple", "/fake-power-point-table.pptx"),
    ("Maple Leafs TOR", "/stanley-cups.xlsx"),
    ("Violets are blue roses", "/fake-email.eml"),
    ("telemark turn", "/winter-sports.epub"),
    ("favorite things parrots hockey", "/simple.odt"),
    ("first paragraph heading", "/fake-doc.rtf"),
    ("partridges pear tree", "/simple.yaml"),
    ("lorem ipsum dolor", "/loremipsum-flat.pdf"),
    ("okapi shipment", "/deck.pptx"),
    ("Jacquard loom", "/note.eml"),
    ("Puffin Gannet", "/birds.ods"),
    ("Quokka census", "/doc.rtf"),
    ("Lighthouse keeper", "/README"),
    ("gravitate pelican", "/tool.py"),
    ("bluefin codename", "/conf.yaml"),
    ("Valparaiso", "/user.json"),
    ("Trondheim Norway", "/villes.csv"),
    # old shares: legacy Office, UTF-16 mail, archive members
    ("favorite things parrots hockey", "/legacy/simple.doc"),
    ("Tangerine Aqua Purple", "/legacy/deck.ppt"),
    ("Violets are blue roses", "/mail/utf16-le-bom.eml"),
    ("Violets are blue roses", "/mail/utf16-be.eml"),
    ("Maple Leafs TOR", "/bundle.zip!/sheets/stanley-cups.xlsx"),
    ("telemark turn", "/bundle.zip!/books/winter-sports.epub"),
    ("first paragraph heading", "/old.tar.gz!/rtf/fake-doc.rtf"),
]


def old_share(tree: Path) -> list[str]:
    """The cases of old shares (see the module docstring); returns what could not be made here."""
    import io
    import tarfile
    import zipfile

    from msoffcrypto.format.ooxml import OOXMLFile

    from quarry.ingest.parsers.legacy import soffice

    formats = DATA / "formats"
    missing = []
    (tree / "legacy").mkdir(parents=True)
    if soffice():
        for src, target, name in (
            (formats / "simple.odt", "doc", "simple.doc"),
            (formats / "fake-power-point-table.pptx", "ppt", "deck.ppt"),
        ):
            out = tree / "made"
            subprocess.run(
                [
                    soffice(),
                    "--headless",
                    "--norestore",
                    f"-env:UserInstallation={(tree / 'p').as_uri()}",
                    "--convert-to",
                    target,
                    "--outdir",
                    str(out),
                    str(src),
                ],
                check=True,
                capture_output=True,
            )
            (out / f"{src.stem}.{target}").rename(tree / "legacy" / name)
        shutil.rmtree(tree / "made")
        shutil.rmtree(tree / "p", ignore_errors=True)
    else:
        missing.append("LibreOffice (no DOC/PPT)")
    (tree / "mail").mkdir()
    text = (formats / "fake-email.eml").read_bytes().decode("utf-8")
    (tree / "mail" / "utf16-le-bom.eml").write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    (tree / "mail" / "utf16-be.eml").write_bytes(text.encode("utf-16-be"))
    with zipfile.ZipFile(tree / "bundle.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(formats / "stanley-cups.xlsx", "sheets/stanley-cups.xlsx")
        zf.write(formats / "winter-sports.epub", "books/winter-sports.epub")
    with tarfile.open(tree / "old.tar.gz", "w:gz") as tf:
        tf.add(formats / "fake-doc.rtf", "rtf/fake-doc.rtf")
    locked = io.BytesIO()
    with open(formats / "stanley-cups.xlsx", "rb") as fh:
        OOXMLFile(fh).encrypt("secret", locked)
    (tree / "locked.xlsx").write_bytes(locked.getvalue())
    return missing


def quarry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quarry.cli.main", *args], capture_output=True, text=True, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=3, help="sets of generated samples")
    parser.add_argument("--no-ocr", action="store_true")
    args = parser.parse_args()

    from quarry.ingest.discover import discover

    with_test_helpers()
    from tests.samples import mixed_tree

    work = Path(tempfile.mkdtemp(prefix="quarry-bench-formats-"))
    try:
        tree = work / "tree"
        for folder in ("formats", "scanned"):
            shutil.copytree(DATA / folder, tree / folder, dirs_exist_ok=True)
        for i in range(args.copies):
            mixed_tree(tree / f"set{i}")
        not_made = old_share(tree / "old-share")
        readable, unsupported = discover([tree])
        types = Counter(f.file_type for f in readable)
        t = time.perf_counter()
        done = quarry("index", str(tree), "--db", str(work / "db"), "--json", *(["--no-ocr"] if args.no_ocr else []))
        seconds = time.perf_counter() - t
        if done.returncode not in (0, 3):
            sys.exit(f"index exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        report = json.loads(done.stdout)
        found = {}
        for query, name in QUERIES:
            out = json.loads(
                quarry("search", query, "--db", str(work / "db"), "--mode", "bm25", "--json", "-k", "10").stdout
            )["results"]
            hit = next((r for r in out if r["path"].endswith(name)), None)
            found[name.lstrip("/")] = {
                "query": query,
                "found": hit is not None,
                "rank": hit["rank"] if hit else None,
                "page_start": hit["page_start"] if hit else None,
            }
        errors = Counter(e["error"].split(":")[0] for e in report["errors"])
        failed_here = {
            e["path"].split("/old-share/")[1]: e["error"] for e in report["errors"] if "/old-share/" in e["path"]
        }
        result = {
            "files": len(readable) + len(unsupported),
            "by_type": dict(types),
            "unsupported": len(unsupported),
            "added": report["added"],
            "failed": report["failed"],
            "failures": dict(errors),
            "chunks": report["chunks"],
            "ocr_pages": report["ocr_pages"],
            "ocr_seconds": report["ocr_seconds"],
            "index_seconds": round(seconds, 1),
            "durations": report["durations"],
            "search": found,
            "old_share_failures": failed_here,
            "not_made": not_made,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"{result['files']} files: {result['added']} indexed, {result['failed']} failed, "
        f"{result['unsupported']} unsupported; {result['chunks']} chunks; OCR {result['ocr_pages']} pages in "
        f"{result['ocr_seconds']:.1f} s; index {result['index_seconds']} s\n"
    )
    print("| type | files |\n|---|---|")
    for kind, n in sorted(types.items()):
        print(f"| {kind} | {n} |")
    print("\n| failure | files |\n|---|---|")
    for cause, n in errors.most_common():
        print(f"| {cause} | {n} |")
    print(f"\nold-share failures: {failed_here}" + (f"; not made here: {not_made}" if not_made else ""))
    print("\n| file | query | found at rank | page |\n|---|---|---|---|")
    for name, f in found.items():
        print(f"| {name} | {f['query']} | {f['rank'] or 'NOT FOUND'} | {f['page_start'] or ''} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
