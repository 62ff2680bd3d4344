"""Incremental re-indexing on a copy of the Sourcegraph handbook.

Runs, side by side in one process (one Prefect server, one loaded model):

1. full index of the tree;
2. re-index with nothing changed (every file touched: mtime changes, bytes do not);
3. edit one paragraph of one file, delete one file, rename one file, re-index.

For step 3 it counts the chunks whose embedded text changed (by comparing the catalog before
and after) and checks that exactly those were embedded.

    python bench/incremental.py [--tree DIR] [--backend B] [--json]

Prints a table (stderr with --json) and writes bench/results/incremental.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED

HANDBOOK = SHARED / "trees" / "sourcegraph-handbook"


def chunk_hashes(db: Path) -> set[tuple[str, str]]:
    import quarry

    with quarry.open(db) as idx:
        rows = idx.snapshot.con.execute(
            "SELECT d.rel_path, c.text_hash FROM chunks c JOIN documents d USING (doc_id)"
        ).fetchall()
    return set(rows)


def edit_one_paragraph(tree: Path) -> Path:
    """Append a sentence to the first long paragraph of a mid-sized Markdown file."""
    files = sorted(p for p in tree.rglob("*.md") if 4000 < p.stat().st_size < 20000)
    target = files[len(files) // 2]
    text = target.read_text(encoding="utf-8")
    paras = text.split("\n\n")
    i = next(i for i, p in enumerate(paras) if len(p) > 200 and not p.lstrip().startswith(("#", "|", "-", "*", "`")))
    paras[i] = paras[i].rstrip() + " This sentence was added by the incremental benchmark."
    target.write_text("\n\n".join(paras), encoding="utf-8")
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=HANDBOOK)
    ap.add_argument("--backend", default=None, help="embedding backend (default: quarry's default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.tree.exists():
        sys.exit(f"tree not found: {args.tree}")
    if args.backend:
        os.environ["QUARRY_EMBED_BACKEND"] = args.backend

    from quarry.flows.orchestration import prefect_api

    work = Path(tempfile.mkdtemp(prefix="quarry-bench-inc-"))
    tree, db = work / "tree", work / "db"
    shutil.copytree(args.tree, tree)
    rows = []
    with prefect_api(work / "logs"):
        from quarry.flows.index import index_flow

        def run(step: str, **extra):
            t = time.perf_counter()
            report = index_flow([str(tree)], db=str(db))
            seconds = time.perf_counter() - t
            row = {
                "step": step,
                "seconds": round(seconds, 2),
                **{
                    k: report[k]
                    for k in (
                        "added",
                        "updated",
                        "moved",
                        "deleted",
                        "skipped",
                        "chunks",
                        "embedded_chunks",
                        "reused_vectors",
                        "model_calls",
                    )
                },
                **extra,
            }
            rows.append(row)
            return row

        full = run("full index")
        for path in tree.rglob("*"):
            if path.is_file():
                os.utime(path)
        nochange = run("no change (all touched)")
        before = chunk_hashes(db)
        edited = edit_one_paragraph(tree)
        deleted = sorted(tree.rglob("*.md"))[3]
        deleted.unlink()
        renamed = sorted(tree.rglob("*.md"))[7]
        renamed.rename(renamed.with_name("renamed-" + renamed.name))
        edit_rel = str(edited.relative_to(tree))
        old_edit = {h for p, h in before if p == edit_rel}
        edit = run("edit 1 + delete 1 + rename 1")
        new_edit = {h for p, h in chunk_hashes(db) if p == edit_rel}
        changed = len(new_edit - old_edit)
        edit["chunks_changed"] = changed
        edit["exact"] = edit["embedded_chunks"] == changed

    result = {
        "tree": str(args.tree),
        "files": sum(1 for _ in tree.rglob("*.md")),
        "backend": os.environ.get("QUARRY_EMBED_BACKEND", "default"),
        "nochange_fraction": round(nochange["seconds"] / full["seconds"], 4),
        "results": rows,
    }
    out = ROOT / "bench" / "results" / "incremental.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    table = sys.stderr if args.json else sys.stdout
    print(
        f"{'step':<32} {'s':>8} {'add':>5} {'upd':>5} {'mov':>5} {'del':>5} {'skip':>5} {'embedded':>9} "
        f"{'reused':>7} {'calls':>6}",
        file=table,
    )
    for r in rows:
        print(
            f"{r['step']:<32} {r['seconds']:>8.2f} {r['added']:>5} {r['updated']:>5} {r['moved']:>5} "
            f"{r['deleted']:>5} {r['skipped']:>5} {r['embedded_chunks']:>9} {r['reused_vectors']:>7} "
            f"{r['model_calls']:>6}",
            file=table,
        )
    print(
        f"no-change run = {100 * result['nochange_fraction']:.2f}% of the full index; edit run embedded "
        f"{edit['embedded_chunks']} chunks, {changed} chunks changed text (exact: {edit['exact']})",
        file=table,
    )
    if args.json:
        print(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
