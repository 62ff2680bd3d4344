"""The embed stage: reuse stored vectors by text hash, embed the rest in token-budgeted batches.

It is two steps so that only missing texts travel to the process that embeds them: the flow's
process, which holds the store, asks it for stored vectors first (:func:`plan_embedding`); a
task anywhere (a thread, a Dask or Ray worker) then embeds what is left with its own cached model
(:func:`embed_texts`). :func:`embed_records` does both in one process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from quarry.core import faults
from quarry.core.errors import EmbeddingError
from quarry.core.models import DocumentRecord
from quarry.ingest.embedders.base import Embedder, batches_by_budget


@dataclass
class EmbedStats:
    embedded: int = 0  # chunks whose vector came from the model
    reused: int = 0  # chunks whose vector came from the store
    calls: int = 0  # model calls: sub-batches run by a local model, requests sent to an API
    truncated: int = 0  # chunks whose embedded text exceeds the model's input

    def add(self, other: EmbedStats) -> None:
        for name in ("embedded", "reused", "calls", "truncated"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class EmbedPlan:
    """A batch's chunks split into vectors the store already has and texts to embed.

    ``hashes``, ``texts`` and ``n_tokens`` are aligned: one entry per distinct text to embed.
    """

    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # reused, by text hash
    hashes: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    n_tokens: list[int] = field(default_factory=list)
    stats: EmbedStats = field(default_factory=EmbedStats)


@dataclass
class EmbeddedTexts:
    """What the embed task returns: one float32 row per text, the model calls it cost, and when
    it ran (``started``, epoch seconds, and ``seconds``)."""

    vectors: np.ndarray
    calls: int = 0
    seconds: float = 0.0
    started: float = 0.0


def plan_embedding(
    records: list[DocumentRecord], lookup: Callable[[list[str]], dict[str, np.ndarray]] | None = None
) -> EmbedPlan:
    """Which chunks of ``records`` need the model: ``lookup`` (the store's vectors by text hash)
    is asked first, and identical texts within the batch are embedded once."""
    plan = EmbedPlan()
    chunks = [c for r in records for c in r.chunks]
    plan.stats.truncated = sum(c.truncated for c in chunks)
    if not chunks:
        return plan
    wanted = {c.text_hash: c for c in chunks}
    plan.vectors = dict(lookup(list(wanted)) if lookup else {})
    plan.stats.reused = sum(1 for c in chunks if c.text_hash in plan.vectors)
    plan.stats.embedded = len(chunks) - plan.stats.reused
    for h, c in wanted.items():
        if h not in plan.vectors:
            plan.hashes.append(h)
            plan.texts.append(c.embed_text)
            plan.n_tokens.append(c.n_tokens or len(c.embed_text) // 4 + 1)
    return plan


def embed_texts(
    texts: list[str], embedder: Embedder, n_tokens: list[int] | None = None, budget_tokens: int = 8192
) -> EmbeddedTexts:
    """Embed ``texts`` (float32, one row each). An embedder that plans its own sub-batches gets
    them all in one call; others get batches of about ``budget_tokens`` tokens (``n_tokens``)."""
    started, t = time.time(), time.perf_counter()
    if not texts:
        return EmbeddedTexts(np.zeros((0, embedder.dim), dtype=np.float32), 0, 0.0, started)
    out = None  # allocated after the first call: a hosted model may learn its dimension from it
    calls = 0
    if getattr(embedder, "plans_batches", False):
        # The embedder sorts by length, cuts its own sub-batches and runs them on its threads
        # or concurrent requests; slicing here would starve it (one 256-token chunk per call).
        groups = [list(range(len(texts)))]
    else:
        lengths = n_tokens or [len(t) // 4 + 1 for t in texts]
        groups = batches_by_budget(lengths, budget_tokens)
    for batch in groups:
        part = [texts[i] for i in batch]
        faults.point("embed")
        before = getattr(embedder, "calls", None)
        got = embedder.embed(part)
        if got.shape != (len(part), embedder.dim):
            raise EmbeddingError(f"embedder returned shape {got.shape} for {len(part)} texts of dim {embedder.dim}")
        # model calls as the embedder counts them (sub-batches, HTTP requests), else one per call
        after = getattr(embedder, "calls", None)
        calls += after - before if before is not None and after is not None else 1
        if out is None:
            out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
        out[batch] = got
    assert out is not None  # texts, hence at least one batch
    return EmbeddedTexts(out, calls, time.perf_counter() - t, started)


def embed_records(
    records: list[DocumentRecord],
    embedder: Embedder,
    lookup: Callable[[list[str]], dict[str, np.ndarray]] | None = None,
    budget_tokens: int = 8192,
) -> tuple[dict[str, np.ndarray], EmbedStats]:
    """Vectors for every chunk of ``records``, keyed by text hash (both steps in this process).

    ``lookup`` returns stored vectors for hashes (the cache, asked before any model call).
    Identical texts within the batch are embedded once.
    """
    plan = plan_embedding(records, lookup)
    done = embed_texts(plan.texts, embedder, plan.n_tokens, budget_tokens)
    plan.stats.calls = done.calls
    return {**plan.vectors, **dict(zip(plan.hashes, done.vectors))}, plan.stats
