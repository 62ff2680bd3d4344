"""Which converter reads legacy DOC and PPT: LibreOffice (what quarry uses), antiword, catdoc/catppt,
and aspose-words-foss (a pure-Python DOC reader), on the same files.

    python bench/legacy_office.py                          # DOC/PPT made by LibreOffice from ../shared/data/formats
    python bench/legacy_office.py --extra DIR              # plus the real .doc/.ppt files under DIR
    python bench/legacy_office.py --aspose-python PYTHON   # an interpreter with aspose-words-foss installed

Each file's reference text is what quarry reads from its source (the DOCX/ODT/RTF/PPTX it was
made from; for --extra files, a sibling .docx/.pptx/.odt of the same name when there is one).
Recall is the share of the reference's distinct words found in the converter's text. A converter
that is not installed is reported as such. Writes bench/results/legacy_office.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED

HERE = ROOT / "bench"
DATA = SHARED / "formats"
RESULTS = HERE / "results" / "legacy_office.json"
SOURCES = {
    "doc": ["simple.odt", "docx-tables.docx", "duplicate-paragraphs.docx", "fake-doc.rtf"],
    "ppt": ["fake-power-point-table.pptx"],
}
_ASPOSE = """import sys, aspose.words_foss as aw
sys.stdout.write(aw.Document(sys.argv[1]).get_text())"""


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W_]+", text.lower()) if len(w) > 1}


def quarry_text(path: Path) -> str:
    from quarry.ingest.parsers import parse_file

    return parse_file(str(path)).text


def run(cmd: list[str], timeout: int = 120) -> str:
    done = subprocess.run(cmd, capture_output=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()[-1:]
            or [f"exit {done.returncode}"]
        )
    return done.stdout.decode("utf-8", "replace")


def converters(aspose_python: str | None) -> dict:
    """name -> (kinds it reads, function path -> text) for each converter present here."""
    from quarry.ingest.parsers.legacy import soffice

    found = {}
    if soffice():
        found["libreoffice"] = (("doc", "ppt"), quarry_text)
    if shutil.which("antiword"):
        found["antiword"] = (("doc",), lambda p: run(["antiword", "-w", "0", "-m", "UTF-8.txt", str(p)]))
    if shutil.which("catdoc"):
        found["catdoc/catppt"] = (
            ("doc", "ppt"),
            lambda p: run(
                ["catdoc", "-w", "-d", "utf-8", str(p)] if p.suffix == ".doc" else ["catppt", "-d", "utf-8", str(p)]
            ),
        )
    if aspose_python:
        found["aspose-words-foss"] = (("doc",), lambda p: run([aspose_python, "-c", _ASPOSE, str(p)]))
    return found


def make_files(work: Path) -> list[tuple[Path, str]]:
    """(legacy file, reference text): DOC and PPT written by LibreOffice from the shared samples."""
    from quarry.ingest.parsers.legacy import soffice

    out = []
    for kind, names in SOURCES.items():
        srcs = [DATA / n for n in names if (DATA / n).exists()]
        subprocess.run(
            [
                soffice(),
                "--headless",
                "--norestore",
                f"-env:UserInstallation={(work / 'p').as_uri()}",
                "--convert-to",
                kind,
                "--outdir",
                str(work / "made"),
                *map(str, srcs),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        out += [(work / "made" / f"{s.stem}.{kind}", quarry_text(s)) for s in srcs]
    return out


def extra_files(folder: Path) -> list[tuple[Path, str | None]]:
    out = []
    for path in sorted(folder.rglob("*")):
        if path.suffix.lower() not in (".doc", ".ppt"):
            continue
        sibling = next((path.with_suffix(s) for s in (".docx", ".pptx", ".odt") if path.with_suffix(s).exists()), None)
        out.append((path, quarry_text(sibling) if sibling else None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extra", type=Path, help="a folder of real .doc/.ppt files")
    parser.add_argument("--aspose-python", help="a Python interpreter with aspose-words-foss installed")
    args = parser.parse_args()
    from quarry.ingest.parsers.legacy import soffice

    if soffice() is None:
        sys.exit("LibreOffice (soffice) is needed to write the legacy files: make office")
    found = converters(args.aspose_python)
    work = Path(tempfile.mkdtemp(prefix="quarry-bench-legacy-"))
    try:
        files = make_files(work) + (extra_files(args.extra) if args.extra else [])
        rows = []
        for path, reference in files:
            kind = path.suffix.lower().lstrip(".")
            for name, (kinds, convert) in found.items():
                if kind not in kinds:
                    continue
                t = time.perf_counter()
                try:
                    text, error = convert(path), ""
                except Exception as exc:  # a converter's failure is a result here
                    text, error = "", str(exc)[:120]
                seconds = time.perf_counter() - t
                recall = (
                    len(words(text) & words(reference)) / len(words(reference))
                    if reference and words(reference)
                    else None
                )
                rows.append(
                    {
                        "file": path.name,
                        "source": "made" if path.is_relative_to(work) else "extra",
                        "converter": name,
                        "ok": bool(text.strip()),
                        "recall": recall,
                        "seconds": round(seconds, 3),
                        "chars": len(text),
                        "error": error,
                    }
                )

        # what a batch costs: quarry converts a batch's legacy files with one LibreOffice call
        from quarry.ingest.parsers.legacy import convert_many

        legacy = [(str(n), p.read_bytes(), p.suffix.lower().lstrip(".")) for n, (p, _) in enumerate(files)]
        t = time.perf_counter()
        converted = convert_many(legacy, 300)
        batch = {
            "files": len(legacy),
            "converted": len(converted),
            "seconds": round(time.perf_counter() - t, 2),
            "seconds_per_file": round((time.perf_counter() - t) / max(len(legacy), 1), 3),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)

    summary = {}
    for name in found:
        mine = [r for r in rows if r["converter"] == name]
        recalls = [r["recall"] if r["ok"] else 0.0 for r in mine if r["recall"] is not None]
        summary[name] = {
            "files": len(mine),
            "read": sum(r["ok"] for r in mine),
            "mean_recall": round(statistics.mean(recalls), 3) if recalls else None,
            "median_seconds": round(statistics.median(r["seconds"] for r in mine), 3) if mine else None,
        }
    print("| converter | files | read | mean recall (unread = 0) | median s/file |\n|---|---|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['files']} | {s['read']} | {s['mean_recall']} | {s['median_seconds']} |")
    print(
        f"\nLibreOffice, one call for all {batch['files']} files (what a batch does): {batch['converted']} converted "
        f"in {batch['seconds']} s, {batch['seconds_per_file']} s a file"
    )
    print("\n| file | converter | read | recall | s | error |\n|---|---|---|---|---|---|")
    for r in rows:
        recall = "" if r["recall"] is None else f"{r['recall']:.2f}"
        print(
            f"| {r['file']} ({r['source']}) | {r['converter']} | {'yes' if r['ok'] else 'no'} | {recall} | "
            f"{r['seconds']:.2f} | {r['error'][:60]} |"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"summary": summary, "libreoffice_batch": batch, "files": rows}, indent=2))


if __name__ == "__main__":
    main()
