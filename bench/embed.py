"""Benchmark the local embedding backends side by side on the same real chunks.

    python bench/embed.py                 # 600 chunks, table on stdout
    python bench/embed.py --chunks 300 --json

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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
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
