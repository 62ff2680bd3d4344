"""Boilerplate lines and what they make of a chunk (pure logic; the commit keeps the flags,
quarry/store/boilerplate.py).

A line (:func:`quarry.retrieval.corpus.minhash.line_hash`: 20+ normalised characters) is boilerplate
in a root when at least ``max(MIN_DOCS, ceil(SHARE x n))`` of the root's ``n`` documents hold it,
copies (``dup_of`` set) not counted. A chunk's ``boilerplate`` is the share of its lines that are.
With ``QUARRY_BOILERPLATE=strip`` those lines are left out of the chunk's BM25 text and of the text
its vector is computed from; the stored text stays whole.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from quarry.core.environment import environment
from quarry.core.models import join_header
from quarry.retrieval.corpus.minhash import line_hash
from quarry.retrieval.textnorm import bm25_text

__all__ = [
    "MIN_DOCS",
    "SHARE",
    "MODES",
    "threshold",
    "is_boilerplate",
    "share",
    "strip_lines",
    "stripping",
    "search_text",
    "embed_text",
]

MIN_DOCS = 3  # a line is boilerplate in a root when at least this many of its documents hold it...
SHARE = 0.02  # ...and at least this share of them
MODES = ("keep", "strip")


def threshold(n_docs: int) -> int:
    """Documents of a root of ``n_docs`` that must hold a line for it to be boilerplate."""
    return max(MIN_DOCS, math.ceil(SHARE * n_docs))


def is_boilerplate(holders: int, n_docs: int) -> bool:
    return holders >= threshold(n_docs)


def share(lines: Collection[int] | None, boiler: Collection[int]) -> float:
    """The share of ``lines`` (a chunk's line hashes) in ``boiler``; 0 for a chunk without lines."""
    if not lines:
        return 0.0
    return sum(1 for h in lines if h in boiler) / len(lines)


def stripping() -> bool:
    """Whether ``QUARRY_BOILERPLATE=strip``: boilerplate lines leave the BM25 text and the embedded text."""
    return environment().boilerplate == "strip"


def strip_lines(text: str, boiler: Collection[int]) -> str:
    """``text`` without its lines whose hash is in ``boiler``."""
    if not boiler:
        return text
    return "\n".join(line for line in text.splitlines() if line_hash(line) not in boiler)


def search_text(header: str, text: str, boiler: Collection[int] = ()) -> str:
    """The BM25 text of a chunk (header + text, boilerplate lines ``boiler`` left out)."""
    return bm25_text(f"{header}\n{strip_lines(text, boiler)}")


def embed_text(header: str, text: str, boiler: Collection[int] = ()) -> str:
    """The text a chunk's vector is computed from (boilerplate lines ``boiler`` left out)."""
    return join_header(header, strip_lines(text, boiler))
