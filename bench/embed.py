"""Benchmark the local embedding backends side by side on the same real chunks.

    python bench/embed.py                 # 600 chunks, table on stdout
    python bench/embed.py --chunks 300 --json

The torch baseline needs quarry[torch]: without torch here, the script re-runs itself under
.venv-torch (``make torch-venv``) or ``$QUARRY_TORCH_PYTHON``.

Chunks come from the Sourcegraph handbook markdown and the sample PDFs under ../shared/data,
split into ~800-character pieces on paragraph boundaries. Every backend embeds the same
chunks in the same order; the first row is the naive baseline (sentence-transformers fp32,
fixed batches of 32 in input order) and every row's vectors are compared with the
sentence-transformers fp32 vectors. Writes bench/results/embed.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import time

from common import ROOT

HERE = str(ROOT / "bench")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
RESULTS = os.path.join(HERE, "results", "embed.json")


def split_paragraphs(text: str, size: int = 800) -> list[str]:
    """Pack blank-line-separated paragraphs into pieces of about ``size`` characters.

    A paragraph longer than ``size`` is cut at whitespace so that no piece is much larger.
    """
    pieces: list[str] = []
    cur = ""
    for para in (p.strip() for p in text.split("\n\n")):
        if not para:
            continue
        while len(para) > size:
            cut = para.rfind(" ", 0, size)
            cut = cut if cut > size // 2 else size
            pieces.append(para[:cut].strip())
            para = para[cut:].strip()
        if cur and len(cur) + 2 + len(para) > size:
            pieces.append(cur)
            cur = para
        else:
            cur = f"{cur}\n\n{para}" if cur else para
    if cur:
        pieces.append(cur)
    return [p for p in pieces if len(p) >= 20]


def pdf_text(path: str) -> str:
    """Text of a PDF, pages joined by blank lines; '' when pypdf cannot read it."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            reader.decrypt("")
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    except Exception as exc:  # a sample PDF that is encrypted or broken only shrinks the pool
        print(f"skipping {os.path.relpath(path, DATA)}: {exc}", file=sys.stderr)
        return ""


def load_chunks(n: int, seed: int = 0) -> list[str]:
    """``n`` chunks drawn without replacement from all sources, in a fixed shuffled order."""
    md = sorted(glob.glob(os.path.join(DATA, "trees", "sourcegraph-handbook", "content", "**", "*.md"), recursive=True))
    pdfs = sorted(glob.glob(os.path.join(DATA, "pdf", "*.pdf")) + glob.glob(os.path.join(DATA, "formats", "*.pdf")))
    pool: list[str] = []
    for path in pdfs:
        pool.extend(split_paragraphs(pdf_text(path)))
    for path in md:
        with open(path, encoding="utf-8", errors="replace") as f:
            pool.extend(split_paragraphs(f.read()))
    if not pool:
        raise SystemExit(f"no chunks found under {DATA}")
    random.Random(seed).shuffle(pool)
    return pool[:n]


def make_backends(names: list[str], cache_dir: str | None) -> list[tuple[str, object]]:
    """(row label, embedder) pairs; the first is always the naive torch baseline."""
    from quarry.ingest.embedders.local import TorchEmbedder, get_local_embedder

    rows: list[tuple[str, object]] = [("torch", TorchEmbedder(batch_size=32, length_sorted=False))]
    for name in names:
        if name == "torch":
            continue
        if name == "torch-sorted":
            rows.append((name, TorchEmbedder(batch_size=32, length_sorted=True)))
        elif name.startswith("onnx-int8:"):  # one int8 variant, forced: onnx-int8:s8, onnx-int8:u8, ...
            from quarry.ingest.embedders.onnx_backend import OnnxEmbedder

            rows.append((name, OnnxEmbedder(quantize=True, cache_dir=cache_dir, int8_variant=name.split(":", 1)[1])))
        else:
            rows.append((name, get_local_embedder(name, cache_dir=cache_dir)))
    return rows


def run(chunks: list[str], names: list[str], repeat: int, cache_dir: str | None) -> list[dict]:
    """Load, warm up and time every backend; ``repeat`` rounds interleaved across backends."""
    rows = make_backends(names, cache_dir)
    results: list[dict] = []
    for label, embedder in rows:
        embedder.load()
        embedder.embed(chunks[:8])  # warm-up: first-call allocations and thread pools
        results.append(
            {
                "backend": label,
                "load_s": round(embedder.load_seconds, 3),
                "export_s": round(getattr(embedder, "export_seconds", 0.0), 3),
            }
        )
        print(f"loaded {label} in {embedder.load_seconds:.2f}s", file=sys.stderr)
    vectors: dict[str, np.ndarray] = {}
    timings: dict[str, list[float]] = {label: [] for label, _ in rows}
    for round_no in range(repeat):
        # interleaved rounds: on a shared machine, load from other work hits every backend alike
        for label, embedder in rows:
            started = time.perf_counter()
            vectors[label] = embedder.embed(chunks)
            timings[label].append(time.perf_counter() - started)
        print(f"round {round_no + 1}/{repeat} done", file=sys.stderr)
    reference = vectors["torch"]
    baseline = len(chunks) / min(timings["torch"])
    for row, (label, _) in zip(results, rows):
        cosine = np.sum(vectors[label] * reference, axis=1)
        best = len(chunks) / min(timings[label])
        # same-round ratios: load from other work on a shared machine tends to hit a whole round
        per_round = [b / t for t, b in zip(timings[label], timings["torch"])]
        row.update(
            {
                "chunks_per_s": round(best, 2),
                "chunks_per_s_median": round(len(chunks) / float(np.median(timings[label])), 2),
                "speedup": round(best / baseline, 2),
                "speedup_rounds": [round(r, 2) for r in per_round],
                "cosine_mean": round(float(cosine.mean()), 6),
                "cosine_min": round(float(cosine.min()), 6),
                "seconds": [round(t, 3) for t in timings[label]],
            }
        )
    return results


def table(n: int, results: list[dict], tokens: list[int]) -> str:
    """Markdown table of the results."""
    lines = [
        f"{n} chunks, {int(np.mean(tokens))} tokens on average (max {max(tokens)}); "
        f"best of {len(results[0]['seconds'])} interleaved rounds, {os.cpu_count()} CPUs",
        "",
        "| backend | chunks/s | median | speedup | per round | load s | export s | cosine mean | cosine min |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['backend']} | {r['chunks_per_s']:.1f} | {r['chunks_per_s_median']:.1f} | {r['speedup']:.2f}x "
            f"| {' '.join(f'{x:.2f}' for x in r['speedup_rounds'])} "
            f"| {r['load_s']:.2f} | {r['export_s']:.1f} | {r['cosine_mean']:.5f} | {r['cosine_min']:.5f} |"
        )
    return "\n".join(lines)


def ensure_torch(argv: list[str]) -> None:
    """Re-run this script under a Python that has torch when this one has none.

    The baseline is sentence-transformers on torch, which the default install (.venv) leaves
    out; ``make torch-venv`` builds .venv-torch, the same pinned packages plus quarry[torch].
    ``$QUARRY_TORCH_PYTHON`` names another interpreter.
    """
    import importlib.util

    if all(importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers")):
        return
    python = os.environ.get("QUARRY_TORCH_PYTHON") or os.path.join(ROOT, ".venv-torch", "bin", "python")
    if os.environ.get("QUARRY_BENCH_REEXEC") or not os.path.exists(python):
        raise SystemExit(
            f"bench/embed.py: the torch baseline needs torch and sentence-transformers, which {sys.executable} lacks; "
            "run `make torch-venv` (builds .venv-torch) or set QUARRY_TORCH_PYTHON"
        )
    print(f"no torch in {sys.prefix}: running under {python}", file=sys.stderr)
    os.environ["QUARRY_BENCH_REEXEC"] = "1"
    os.execv(python, [python, os.path.abspath(__file__), *argv])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not {"-h", "--help"} & set(argv):  # the options need no torch to be listed
        ensure_torch(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=600, help="how many chunks to embed (default 600)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds per backend; the best counts (default 3)")
    parser.add_argument(
        "--backends",
        default="torch-sorted,onnx,onnx-int8",
        help="comma-separated rows after the naive torch baseline (default: torch-sorted,onnx,onnx-int8); "
        "onnx-int8:VARIANT forces one int8 variant (s8, s8-attn-out-u8, u8)",
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="ONNX cache directory (default $QUARRY_CACHE_DIR or ~/.cache/quarry/onnx); an empty one measures export",
    )
    parser.add_argument("--json", action="store_true", help="print JSON on stdout and the table on stderr")
    args = parser.parse_args(argv)

    chunks = load_chunks(args.chunks)
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    results = run(chunks, names, max(1, args.repeat), args.cache_dir)

    from quarry.ingest.embedders.local import TorchEmbedder

    tokens = TorchEmbedder().count_tokens(chunks)
    report = {
        "chunks": len(chunks),
        "tokens_mean": round(float(np.mean(tokens)), 1),
        "cpus": os.cpu_count(),
        "repeat": max(1, args.repeat),
        "results": results,
    }
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(report, f, indent=2)
    text = table(len(chunks), results, tokens)
    if args.json:
        print(text, file=sys.stderr)
        print(json.dumps(report))
    else:
        print(text)


if __name__ == "__main__":
    main()
