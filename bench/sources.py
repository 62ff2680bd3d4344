"""One tree indexed from a local folder and from ``s3://`` on moto's S3 server, one after the other.

The tree: ``--md`` Markdown files (SciFact abstracts from ../shared/data/beir, one file each, in
50 folders) and ``--pdfs`` PDFs (runs of 1-3 pages cut from the PDFs of ../shared/data with
pypdf). It is uploaded to a bucket of a moto server on 127.0.0.1 whose request log counts the
object downloads (``GET /bucket/key``; listings are ``GET /bucket?list-type=2``). Then, each a
``quarry index`` process of its own into a store of its own, local run before s3 run:

- ``full``: the first index of the tree;
- ``no_change``: the same again (goal on s3: 0 GETs, and a wall time within 5% of the full run);
- ``edit``: one Markdown file edited (a sentence appended) in the folder and in the bucket
  (goal on s3: 1 GET, 1 document re-processed).

For each: wall time, object GETs, documents (re)processed (``embedded``: added + updated) and
chunks embedded, and the peak RSS of the run (the ``quarry`` process and the children it waited
for, from ``wait4``). Goals: s3 full-run wall at most 1.3x the local one, peak RSS within 1.2x.

    python bench/sources.py [--md 5000] [--pdfs 100] [--embed-backend onnx-int8] [--json] [--keep]

Prints a table (stderr with ``--json``, whose JSON goes to stdout) and writes
bench/results/sources.json: ``{"results": [{"source", "run", "wall_s", "gets", "embedded",
"embedded_chunks", "peak_rss_mb"}], ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, SHARED

DATA = SHARED
BUCKET = "quarry-bench"
PREFIX = "tree"


def build_tree(out: Path, n_md: int, n_pdf: int) -> None:
    """``n_md`` Markdown files from SciFact and ``n_pdf`` PDFs of 1-3 pages of the shared PDFs."""
    from pypdf import PdfReader, PdfWriter

    corpus = DATA / "beir" / "scifact" / "corpus.jsonl"
    if not corpus.is_file():
        sys.exit(f"shared data not found: {corpus}")
    with corpus.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= n_md:
                break
            rec = json.loads(line)
            path = out / "abstracts" / f"{i % 50:02d}" / f"{rec['_id']}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# {rec['title']}\n\n{rec['text']}\n", encoding="utf-8")
    sources = []  # (name, reader, the pages with a text layer: a page without one would fail every run)
    for pdf in sorted((DATA / "pdf").glob("*.pdf")) + sorted((DATA / "formats").glob("*.pdf")):
        try:
            reader = PdfReader(pdf)
            if not reader.is_encrypted:
                pages = [i for i, page in enumerate(reader.pages) if (page.extract_text() or "").strip()]
                if pages:
                    sources.append((pdf.stem, reader, pages))
        except Exception:
            continue
    made = 0
    while made < n_pdf:
        for stem, reader, pages in sources:
            start, length = (made * 7) % len(pages), 1 + made % 3
            writer = PdfWriter()
            for p in pages[start : start + length]:
                writer.add_page(reader.pages[p])
            path = out / "papers" / f"{stem}-{made:03d}.pdf"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as fh:
                writer.write(fh)
            made += 1
            if made >= n_pdf:
                break


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def upload(client, tree: Path) -> int:
    files = [p for p in sorted(tree.rglob("*")) if p.is_file()]
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(lambda p: client.upload_file(str(p), BUCKET, f"{PREFIX}/{p.relative_to(tree).as_posix()}"), files)
        )
    return len(files)


def object_gets(log: Path) -> int:
    pattern = re.compile(rf'"GET /{BUCKET}/[^? ]+ HTTP')
    return sum(1 for line in log.read_text(errors="replace").splitlines() if pattern.search(line))


def measured(root: str, db: Path, env: dict) -> dict:
    """Run ``quarry index`` under a small wrapper process: its wall time, and its peak RSS as the
    wrapper's RUSAGE_CHILDREN states it (the largest of the ``quarry`` process and the children it
    waited for, its private Prefect server among them), untouched by the runs before it."""
    code = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "sys.stdout.write(json.dumps({'rc': p.returncode, 'wall': wall, 'rss': rss, "
        "'out': p.stdout.decode(errors='replace'), 'err': p.stderr.decode(errors='replace')[-3000:]}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "quarry.cli.main", "index", root, "--db", str(db), "--json"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    got = json.loads(done.stdout)
    if got["rc"] not in (0, 3):
        sys.exit(f"quarry index {root} failed ({got['rc']}): {got['err']}")
    report = json.loads(got["out"])
    if report.get("failed"):
        print(f"note: {root}: {report['failed']} failed: {report['errors'][:3]}", file=sys.stderr)
    return {"wall_s": round(got["wall"], 2), "peak_rss_mb": round(got["rss"], 1), "report": report}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--md", type=int, default=5000)
    ap.add_argument("--pdfs", type=int, default=100)
    ap.add_argument("--embed-backend", default=os.environ.get("QUARRY_EMBED_BACKEND", "onnx-int8"))
    ap.add_argument("--json", action="store_true", help="print the JSON on stdout (the table goes to stderr)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (tree, stores, moto's log)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="quarry-sources-bench-"))
    tree = work / "tree"
    build_tree(tree, args.md, args.pdfs)
    log = work / "moto.log"
    port = _port()
    endpoint = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out
        )
    results = []
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        aws = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_ALLOW_HTTP": "true",
        }
        env = {
            **os.environ,
            **aws,
            "QUARRY_EMBED_BACKEND": args.embed_backend,
            "HF_HUB_OFFLINE": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
        }
        import boto3

        client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench-secret",
        )
        client.create_bucket(Bucket=BUCKET)
        t0 = time.perf_counter()
        n = upload(client, tree)
        print(
            f"tree: {n} files ({args.md} Markdown, {args.pdfs} PDF), uploaded in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
        url = f"s3://{BUCKET}/{PREFIX}"
        edited = sorted((tree / "abstracts").rglob("*.md"))[len(list((tree / "abstracts").rglob("*.md"))) // 2]
        for run in ("full", "no_change", "edit"):
            if run == "edit":
                edited.write_text(edited.read_text() + "\nThe capybara committee reviewed this abstract.\n")
                client.upload_file(str(edited), BUCKET, f"{PREFIX}/{edited.relative_to(tree).as_posix()}")
            for source, root in (("local", str(tree)), ("s3", url)):
                before = object_gets(log)
                got = measured(root, work / f"db-{source}", env)
                report = got["report"]
                results.append(
                    {
                        "source": source,
                        "run": run,
                        "wall_s": got["wall_s"],
                        "gets": object_gets(log) - before if source == "s3" else 0,
                        "embedded": report["added"] + report["updated"],
                        "embedded_chunks": report["embedded_chunks"],
                        "peak_rss_mb": got["peak_rss_mb"],
                        "failed": report["failed"],
                    }
                )
                print(f"  {source:5} {run:9} {got['wall_s']:8.1f} s", file=sys.stderr)
    finally:
        server.terminate()
        server.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    by = {(r["source"], r["run"]): r for r in results}
    summary = {
        "full_wall_ratio_s3_over_local": round(by["s3", "full"]["wall_s"] / by["local", "full"]["wall_s"], 3),
        "no_change_share_of_full_s3": round(by["s3", "no_change"]["wall_s"] / by["s3", "full"]["wall_s"], 4),
        "peak_rss_ratio_s3_over_local": round(
            max(r["peak_rss_mb"] for r in results if r["source"] == "s3")
            / max(r["peak_rss_mb"] for r in results if r["source"] == "local"),
            3,
        ),
    }
    doc = {
        "results": results,
        "summary": summary,
        "md": args.md,
        "pdfs": args.pdfs,
        "embed_backend": args.embed_backend,
        "load_average": os.getloadavg(),
        "command": " ".join(["python", "bench/sources.py", *sys.argv[1:]]),
    }
    lines = [
        "| source | run | wall s | object GETs | documents embedded | chunks embedded | peak RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['source']} | {r['run']} | {r['wall_s']:.1f} | {r['gets']} | {r['embedded']} | "
        f"{r['embedded_chunks']} | {r['peak_rss_mb']:.0f} |"
        for r in results
    ]
    lines.append("")
    lines.append(
        f"s3 / local full-run wall: {summary['full_wall_ratio_s3_over_local']:.2f} (goal <= 1.3); "
        f"s3 no-change / full: {100 * summary['no_change_share_of_full_s3']:.1f}% (goal <= 5%); "
        f"peak RSS s3 / local: {summary['peak_rss_ratio_s3_over_local']:.2f} (goal <= 1.2)"
    )
    table = "\n".join(lines)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sources.json").write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps(doc, indent=2))
    else:
        print(table)


if __name__ == "__main__":
    main()
