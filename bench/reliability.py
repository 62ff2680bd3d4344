"""Reliability bench: hostile inputs, huge inputs, many tiny files, remote-API and storage faults
and random kill -9s, each tried for real. Prints one table and writes JSON.

    python bench/reliability.py [--kills 20] [--tiny 50000] [--json out.json] [--quick]

For each row: what was tried, how many, crashed (a traceback, a hang or an unexpected exit code:
must be 0), reported (named failures in the run report), data lost (files that should be
searchable and are not, or a store that differs from a clean run's: must be 0), peak RSS of the
indexing process tree, and wall time. Fault rows run the matching tests in tests/reliability
(real servers, real filesystems) and count their cases.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "reliability")]
ENV = {
    **os.environ,
    "QUARRY_EMBED_BACKEND": os.environ.get("QUARRY_EMBED_BACKEND", "hash"),
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}

_MEASURE = r"""
import resource, subprocess, sys, time
t = time.perf_counter()
try:
    done = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=float(sys.argv[1]))
    rc, out = done.returncode, done.stdout + done.stderr
except subprocess.TimeoutExpired as exc:
    rc, out = 124, "timed out"
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print("\n@@MEASURE@@", rc, rss, round(time.perf_counter() - t, 2))
sys.stdout.write(out[-20000:])
"""


def quarry(*args, timeout: float = 1800) -> tuple[int, int, float, str]:
    """Run `quarry ARGS` in a fresh wrapper; (exit code, peak RSS of the tree in MB, seconds, output)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(timeout), sys.executable, "-m", "quarry.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    head, _, rest = done.stdout.partition("@@MEASURE@@ ")
    line, _, out = rest.partition("\n")
    rc, rss, secs = line.split()
    return int(rc), int(rss) // 1024, float(secs), out


def _row(name, tried, crashed, reported, lost, rss=None, seconds=None, note=""):
    return {
        "case": name,
        "tried": tried,
        "crashed": crashed,
        "reported": reported,
        "data_lost": lost,
        "peak_rss_mb": rss,
        "seconds": seconds,
        "note": note,
    }


def _runs(db):
    import quarry as q

    with q.open(db) as idx:
        return idx.runs(1)[0]


def hostile_inputs(work: Path) -> dict:
    from hostile import make_tree

    import quarry as q
    from quarry.core import paths

    tree, db = work / "hostile", work / "hostile-db"
    expects = make_tree(tree)
    rc, rss, secs, out = quarry("index", tree, "--db", db)
    crashed = int(rc not in (0, 3) or "Traceback" in out)
    run = _runs(db)
    lost = 0
    with q.open(db) as idx:
        for e in expects:
            if e.outcome == "indexed" and e.word:
                hits = idx.search(e.word, k=1, mode="bm25").results
                shown = paths.display(os.fsdecode(os.path.join(os.fsencode(tree), e.name)))
                lost += not (hits and hits[0].path == shown)
    rc2, _, _, out2 = quarry("index", tree, "--db", db)
    run2 = _runs(db)
    crashed += int(rc2 not in (0, 3) or "Traceback" in out2)
    lost += run2["added"] + run2["updated"] + run2["deleted"]  # a re-run must change nothing
    return _row(
        "hostile tree (names, bytes, PDFs, zip bomb, FIFO/socket/device, links)",
        len(expects),
        crashed,
        len(run["errors"]),
        lost,
        rss,
        secs,
        f"exit {rc}; re-run: 0 changes, {len(run2['errors'])} reported",
    )


def big_inputs(work: Path, quick: bool) -> list[dict]:
    from hostile import pdf_bytes

    rows = []
    rng = random.Random(7)
    words = "deploy rollback okapi review budget kestrel quartz ledger harbor meadow".split()

    def text_file(path: Path, size: int, single_line: bool) -> None:
        with open(path, "w") as fh:
            n = 0
            while n < size:
                chunk = " ".join(rng.choice(words) for _ in range(2000)) + (" " if single_line else ".\n\n")
                fh.write(chunk)
                n += len(chunk)

    cases = [("50 MB text file", "big.md", 50 << 20, False), ("20 MB single-line file", "line.txt", 20 << 20, True)]
    if quick:
        cases = [(n.replace("50 MB", "5 MB").replace("20 MB", "2 MB"), f, s // 10, one) for n, f, s, one in cases]
    for name, fname, size, one in cases:
        tree = work / fname.split(".")[0]
        tree.mkdir()
        text_file(tree / fname, size, one)
        rc, rss, secs, out = quarry("index", tree, "--db", work / f"{tree.name}-db")
        ok = rc == 0 and "Traceback" not in out
        rows.append(
            _row(
                name,
                1,
                int(not ok and rc not in (0, 3)),
                int(rc == 3),
                int(not ok),
                rss,
                secs,
                out.strip().splitlines()[-1][:80] if not ok else "",
            )
        )
    pages = 200 if quick else 2000
    tree = work / "pdf"
    tree.mkdir()
    (tree / "long.pdf").write_bytes(
        pdf_bytes([f"Page {i}: the heron survey of the weir, count {i}." for i in range(pages)])
    )
    rc, rss, secs, out = quarry("index", tree, "--db", work / "pdf-db")
    ok = rc == 0
    rows.append(
        _row(
            f"{pages}-page generated PDF",
            1,
            int(rc not in (0, 3) or "Traceback" in out),
            int(rc == 3),
            int(not ok),
            rss,
            secs,
            "" if ok else out.strip().splitlines()[-1][:80],
        )
    )
    return rows


def tiny_files(work: Path, n: int) -> dict:
    tree = work / "tiny"
    for i in range(n):
        d = tree / f"d{i // 1000:03d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"f{i}.md").write_text(f"# File {i}\n\nTiny file number {i} about item{i}.\n")
    rc, rss, secs, out = quarry("index", tree, "--db", work / "tiny-db")
    rc2, _, secs2, _ = quarry("index", tree, "--db", work / "tiny-db")
    return _row(
        f"{n:,} tiny files",
        n,
        int(rc not in (0, 3) or "Traceback" in out),
        int(rc == 3),
        int(rc != 0 or rc2 != 0),
        rss,
        secs,
        f"re-run unchanged in {secs2:.0f} s",
    )


def pytest_rows(files: list[tuple[str, str, str]]) -> list[dict]:
    """Run test files; a failed case counts as a crash (the tests assert clean errors, intact stores)."""
    rows = []
    for name, path, marks in files:
        xml = Path(tempfile.mkdtemp()) / "r.xml"
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path, "-m", marks, f"--junitxml={xml}"],
            env=ENV,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        import xml.etree.ElementTree as ET

        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        tests, failures = int(suite.get("tests")), int(suite.get("failures")) + int(suite.get("errors"))
        skipped = int(suite.get("skipped"))
        rows.append(
            _row(
                name,
                tests - skipped,
                failures,
                tests - skipped - failures,
                0,
                None,
                round(time.perf_counter() - t, 1),
                f"{skipped} skipped" if skipped else "",
            )
        )
    return rows


def random_kills(work: Path, kills: int, seed: int = 13) -> dict:
    from storage import contents
    from test_random_kills import kill_run, state

    sample = ROOT / "data" / "sample"
    rng = random.Random(seed)
    clean = {}
    for which in (0, 1):
        tree = work / f"kclean{which}" / "tree"
        shutil.copytree(sample, tree)
        state(tree, which)
        quarry("index", tree, "--db", work / f"kclean{which}" / "db")
        clean[which] = contents(work / f"kclean{which}" / "db")
    tree, db = work / "ktree", work / "kdb"
    shutil.copytree(sample, tree)
    state(tree, 0)
    quarry("index", tree, "--db", db)
    killed = lost = crashed = 0
    t = time.perf_counter()
    for n in range(kills):
        which = (n + 1) % 2
        state(tree, which)
        if kill_run(tree, db, rng.uniform(0.3, 9.0)) == -signal.SIGKILL:
            killed += 1
        rc, _, _, out = quarry("index", tree, "--db", db)
        crashed += int(rc != 0 or "Traceback" in out)
        lost += int(contents(db) != clean[which])
    return _row(
        "kill -9 at random moments, then re-run",
        kills,
        crashed,
        0,
        lost,
        None,
        round(time.perf_counter() - t, 1),
        f"{killed} killed mid-run; store == clean run after each",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--tiny", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="smaller huge inputs (5 MB, 2 MB, 200 pages)")
    ap.add_argument("--skip-tests", action="store_true", help="leave out the rows that run tests/reliability")
    ap.add_argument("--json", default="bench/results/reliability.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="quarry-reliability-"))
    rows = []
    try:
        rows.append(hostile_inputs(work))
        rows += big_inputs(work, args.quick)
        if args.tiny:
            rows.append(tiny_files(work, args.tiny))
        if not args.skip_tests:
            rows += pytest_rows(
                [
                    (
                        "remote API faults (429, 5xx, hang, drop, bad JSON, wrong count/dim, drip)",
                        "tests/reliability/test_api_faults.py",
                        "not slow",
                    ),
                    (
                        "storage faults (read-only, disk full, odd paths, damaged files, readers, 2nd writer)",
                        "tests/reliability/test_storage_faults.py",
                        "slow or not slow",
                    ),
                    (
                        "abuse (hostile strings, export, echoed keys, prompt injection)",
                        "tests/reliability/test_abuse.py",
                        "not slow",
                    ),
                ]
            )
        if args.kills:
            rows.append(random_kills(work, args.kills))
    finally:
        shutil.rmtree(os.fsencode(work), ignore_errors=True)
    print(f"| {'case':<80} | tried | crashed | reported | data lost | peak RSS MB | s |")
    print(f"|{'-' * 82}|------:|--------:|---------:|----------:|------------:|--:|")
    for r in rows:
        print(
            f"| {r['case'][:80]:<80} | {r['tried']} | {r['crashed']} | {r['reported']} | {r['data_lost']} | "
            f"{r['peak_rss_mb'] if r['peak_rss_mb'] is not None else '-'} | {r['seconds'] or '-'} |"
        )
    for r in rows:
        if r["note"]:
            print(f"  {r['case'][:50]}: {r['note']}")
    out = ROOT / args.json
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "machine": os.uname().nodename,
                "cpus": os.cpu_count(),
                "maxrss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    sys.exit(1 if any(r["crashed"] or r["data_lost"] for r in rows) else 0)


if __name__ == "__main__":
    main()
