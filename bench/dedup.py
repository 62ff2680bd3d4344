"""Duplicates and corpus signals: how well near-copies are found, and what the signals cost a run.

1. **Pairs** (no index run): documents of a tree (default: the Sourcegraph handbook in
   ../shared/data) plus generated copies with known truth — for a sample of documents, an exact
   copy, a re-saved copy (line breaks, spacing and case changed), a copy with one paragraph's worth
   of words rewritten (a contiguous 5%), and a rewritten copy (40% of words replaced: must *not* match). Each text
   is signed (quarry/retrieval/corpus/minhash.py), candidates come from the LSH bands as the
   catalog's SQL finds them, and pairs are verified at the threshold. Precision and recall are over
   pairs involving a generated copy; pairs the tree already held are counted apart ("natural").
   ``--libraries`` also times datasketch against rensa for the signatures (datasketch must be
   installed; it is not a dependency).
2. **Cost** (real ``quarry index`` runs, hash embedder, one process each): a full run of a
   subset of the tree plus its generated copies with ``QUARRY_CORPUS_SIGNALS=0`` and with the
   signals, side by side, ``--repeat`` times; then one file edited: the run's parse count (files
   read) and wall time.

    python bench/dedup.py [--tree DIR] [--sample N] [--files N] [--repeat N] [--libraries] [--json]

The table goes to stderr; JSON to bench/results/dedup.json (and stdout with ``--json``). Timings
depend on the machine's load: the load average is recorded with them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

from common import ROOT, SHARED

from quarry.retrieval.corpus import minhash
from quarry.retrieval.corpus.clusters import Member, clusters

TREE = SHARED / "trees" / "sourcegraph-handbook"
KINDS = ("exact", "resaved", "edited", "rewritten")


def variants(text: str, rng: random.Random) -> dict[str, str]:
    words = text.split(" ")
    edited = list(words)  # one paragraph's worth: a contiguous twentieth of the words rewritten
    n = max(1, len(words) // 20)
    start = rng.randrange(0, len(words) - n + 1)
    for i in range(start, start + n):
        edited[i] = f"e{rng.randrange(10**6)}"
    rewritten = list(words)
    for i in rng.sample(range(len(words)), max(1, len(words) * 2 // 5)):
        rewritten[i] = f"w{rng.randrange(10**6)}"
    return {
        "exact": text,
        "resaved": text.replace("\n", "  \r\n").upper(),
        "edited": " ".join(edited),
        "rewritten": " ".join(rewritten),
    }


def pairs_bench(tree: Path, sample: int, threshold: float, seed: int = 1) -> dict:
    rng = random.Random(seed)
    files = sorted(p for p in tree.rglob("*.md") if p.is_file())
    texts = {str(p.relative_to(tree)): p.read_text(errors="replace") for p in files}
    texts = {k: v for k, v in texts.items() if len(v.split()) >= 50}
    picked = rng.sample(sorted(texts), min(sample, len(texts)))
    truth, generated = set(), {}
    for name in picked:
        for kind, text in variants(texts[name], rng).items():
            gen = f"generated/{kind}/{name}"
            generated[gen] = text
            if kind != "rewritten":
                truth.add(tuple(sorted((name, gen))))
    corpus = {**texts, **generated}
    t = time.perf_counter()
    sigs = {k: minhash.signature(v) for k, v in corpus.items()}
    sign_s = time.perf_counter() - t
    buckets: dict[int, list[str]] = {}
    for k, sig in sigs.items():
        for key in minhash.band_keys(sig):
            buckets.setdefault(key, []).append(k)
    candidates = {tuple(sorted(p)) for docs in buckets.values() if len(docs) > 1 for p in combinations(docs, 2)}
    hashes = {k: minhash.content_hash(v) for k, v in corpus.items()}
    members = {k: Member(k, k, 0, hashes[k], sigs[k]) for k in corpus}
    found = set()
    for a, b in candidates:
        sim = 1.0 if hashes[a] == hashes[b] else minhash.similarity(sigs[a], sigs[b])
        if sim >= threshold:
            found.add((a, b))
    # pairs that involve a generated copy: truth is known; a pair of a copy with a document the
    # original duplicates already (a natural copy) is counted as found but not as an error
    involved = {p for p in found if any(x.startswith("generated/") for x in p)}
    natural = {p for p in found if not any(x.startswith("generated/") for x in p)}
    twins = {frozenset(p) for p in natural}

    def explained(pair) -> bool:
        a, b = pair
        ga, gb = (x.split("/", 2)[2] if x.startswith("generated/") else x for x in pair)
        kinds = [x.split("/")[1] for x in pair if x.startswith("generated/")]
        if "rewritten" in kinds:
            return False
        return ga == gb or frozenset((ga, gb)) in twins

    tp = len(involved & truth)
    fp = sum(1 for p in involved - truth if not explained(p))
    fn = len(truth - found)
    per_kind = {
        kind: sum(1 for p in found if any(f"generated/{kind}/" in x for x in p) and p in truth) for kind in KINDS[:3]
    }
    false_rewritten = sum(1 for p in found if any("generated/rewritten/" in x for x in p))
    assigned = clusters(members, candidates, threshold)
    return {
        "documents": len(texts),
        "generated": len(generated),
        "threshold": threshold,
        "candidates": len(candidates),
        "true_pairs": len(truth),
        "found_true": tp,
        "false_pairs": fp,
        "missed": fn,
        "precision": round(tp / max(1, tp + fp), 4),
        "recall": round(tp / max(1, len(truth)), 4),
        "found_by_kind": per_kind,
        "rewritten_matched": false_rewritten,
        "natural_pairs": len(natural),
        "documents_in_clusters": len(assigned),
        "sign_seconds": round(sign_s, 3),
    }


def libraries_bench(tree: Path, n: int = 600) -> dict:
    import re

    texts = [p.read_text(errors="replace") for p in sorted(tree.rglob("*.md"))][:n]
    shingles = []
    for t in texts:
        w = re.findall(r"\w+", t.lower())
        shingles.append([" ".join(w[i : i + 5]) for i in range(max(1, len(w) - 4))])
    import rensa

    t = time.perf_counter()
    for s in shingles:
        m = rensa.RMinHash(128, 42)
        m.update(s)
    out = {"texts": len(texts), "shingles": sum(map(len, shingles)), "rensa_s": round(time.perf_counter() - t, 3)}
    try:
        import datasketch
    except ImportError:
        out["datasketch_s"] = None
        return out
    t = time.perf_counter()
    for s in shingles:
        m = datasketch.MinHash(num_perm=128, seed=42)
        m.update_batch([x.encode() for x in s])
    out["datasketch_s"] = round(time.perf_counter() - t, 3)
    return out


def quarry_index(tree: Path, db: Path, signals: bool, backend: str = "hash") -> tuple[float, dict]:
    env = {
        **os.environ,
        "QUARRY_EMBED_BACKEND": backend,
        "QUARRY_CORPUS_SIGNALS": "1" if signals else "0",
        "QUARRY_DUCKDB_FTS": "0",
    }
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=3600,
    )
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"quarry index failed: {done.stderr.strip().splitlines()[-1:]}")
    runs = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "runs", "--db", str(db), "--json", "--limit", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    run = json.loads(runs.stdout)[0] if runs.returncode == 0 and runs.stdout.strip() else {}
    return wall, run


def cost_bench(tree: Path, files: int, repeat: int, seed: int = 1, backend: str = "hash") -> dict:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="quarry-dedup-"))
    try:
        src = work / "tree"
        picked = sorted(p for p in tree.rglob("*.md") if p.is_file())[:files]
        for p in picked:
            dest = src / p.relative_to(tree)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)
        for p in rng.sample(picked, max(1, files // 10)):  # a tenth copied, half of them edited
            text = p.read_text(errors="replace")
            kind = rng.choice(["exact", "edited"])
            dest = src / "copies" / kind / p.relative_to(tree)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(variants(text, rng)[kind])
        walls = {"without": [], "with": []}
        runs = {}
        for i in range(repeat):
            pair = (("without", False), ("with", True))
            for label, signals in pair if i % 2 == 0 else pair[::-1]:  # alternate: both meet the same load
                db = work / f"db-{label}-{i}"
                wall, run = quarry_index(src, db, signals, backend)
                walls[label].append(round(wall, 2))
                runs[label] = run
        edited = sorted(src.rglob("*.md"))[0]
        edited.write_text(edited.read_text() + "\n\nOne more paragraph, edited for the benchmark.\n")
        wall, run = quarry_index(src, work / f"db-with-{repeat - 1}", True, backend)
        return {
            "files": sum(1 for _ in src.rglob("*.md")),
            "backend": backend,
            "wall_without_s": walls["without"],
            "wall_with_s": walls["with"],
            "overhead": round(sum(walls["with"]) / max(1e-9, sum(walls["without"])) - 1, 4),
            "run_total_without_s": runs["without"].get("durations", {}).get("total"),
            "run_total_with_s": runs["with"].get("durations", {}).get("total"),
            "chunk_stage_without_s": runs["without"].get("durations", {}).get("chunk", {}).get("busy_seconds"),
            "chunk_stage_with_s": runs["with"].get("durations", {}).get("chunk", {}).get("busy_seconds"),
            "commit_without_s": runs["without"].get("durations", {}).get("commit", {}).get("seconds"),
            "commit_with_s": runs["with"].get("durations", {}).get("commit", {}).get("seconds"),
            "edit_run_wall_s": round(wall, 2),
            "edit_run_parsed": run.get("durations", {}).get("parse", {}).get("rows"),
            "edit_run_updated": run.get("updated"),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=TREE)
    ap.add_argument("--sample", type=int, default=100, help="documents given generated copies")
    ap.add_argument("--files", type=int, default=200, help="Markdown files of the tree in the cost runs (0: skip them)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--embed-backend",
        default="hash",
        help="the cost runs' embedder: hash (nothing but parsing and chunking costs) or a real one, e.g. onnx-int8",
    )
    ap.add_argument("--libraries", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.tree.is_dir():
        raise SystemExit(f"no tree at {args.tree}: pass --tree")
    from quarry.core.environment import environment

    out = {"load": os.getloadavg(), "pairs": pairs_bench(args.tree, args.sample, environment().dup_threshold)}
    if args.libraries:
        out["libraries"] = libraries_bench(args.tree)
    if args.files:
        out["cost"] = cost_bench(args.tree, args.files, args.repeat, backend=args.embed_backend)
    out["load_after"] = os.getloadavg()
    p = out["pairs"]
    lines = [
        f"load {out['load'][0]:.1f}",
        f"pairs at threshold {p['threshold']}: {p['documents']} documents + {p['generated']} generated, "
        f"{p['candidates']} candidates",
        f"  precision {p['precision']:.3f}  recall {p['recall']:.3f}  ({p['found_true']} of {p['true_pairs']} true "
        f"pairs, {p['false_pairs']} false, {p['missed']} missed; found by kind {p['found_by_kind']}; "
        f"rewritten copies matched {p['rewritten_matched']})",
        f"  natural pairs in the tree: {p['natural_pairs']}; signing {p['sign_seconds']} s",
    ]
    if "libraries" in out:
        lib = out["libraries"]
        lines.append(
            f"signatures of {lib['texts']} texts: rensa {lib['rensa_s']} s, datasketch {lib['datasketch_s']} s"
        )
    if "cost" in out:
        c = out["cost"]
        lines += [
            f"full run of {c['files']} files: without signals {c['wall_without_s']} s, with {c['wall_with_s']} s "
            f"({c['overhead']:+.1%}); chunk stage {c['chunk_stage_without_s']} -> {c['chunk_stage_with_s']} s, "
            f"commit {c['commit_without_s']} -> {c['commit_with_s']} s",
            f"one file edited: {c['edit_run_wall_s']} s, {c['edit_run_parsed']} file parsed, "
            f"{c['edit_run_updated']} updated",
        ]
    print("\n".join(lines), file=sys.stderr)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "dedup.json").write_text(json.dumps(out, indent=2))
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
