"""The embed stage: reuse stored vectors by text hash, embed the rest in token-budgeted batches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from quarry.ingest.embedders.base import Embedder, batches_by_budget
from quarry.core import faults
from quarry.core.errors import EmbeddingError
from quarry.core.models import DocumentRecord


@dataclass
class EmbedStats:
    embedded: int = 0  # chunks whose vector came from the model
    reused: int = 0  # chunks whose vector came from the store
    calls: int = 0  # model calls: sub-batches run by a local model, requests sent to an API
    truncated: int = 0  # chunks whose embedded text exceeds the model's input


def embed_records(
    records: list[DocumentRecord],
    embedder: Embedder,
    lookup: Callable[[list[str]], dict[str, np.ndarray]] | None = None,
    budget_tokens: int = 8192,
) -> tuple[dict[str, np.ndarray], EmbedStats]:
    """Vectors for every chunk of ``records``, keyed by text hash.

    ``lookup`` returns stored vectors for hashes (the cache, asked before any model call).
    Identical texts within the batch are embedded once.
    """
    stats = EmbedStats()
    chunks = [c for r in records for c in r.chunks]
    stats.truncated = sum(c.truncated for c in chunks)
    if not chunks:
        return {}, stats
    wanted = {c.text_hash: c for c in chunks}
    vectors: dict[str, np.ndarray] = dict(lookup(list(wanted)) if lookup else {})
    stats.reused = sum(1 for c in chunks if c.text_hash in vectors)
    todo = [c for h, c in wanted.items() if h not in vectors]
    if todo:
        if getattr(embedder, "plans_batches", False):
            # The embedder sorts by length, cuts its own sub-batches and runs them on its threads
            # or concurrent requests; slicing here would starve it (one 256-token chunk per call).
            groups = [list(range(len(todo)))]
        else:
            lengths = [c.n_tokens or len(c.embed_text) // 4 + 1 for c in todo]
            groups = batches_by_budget(lengths, budget_tokens)
        for batch in groups:
            texts = [todo[i].embed_text for i in batch]
            faults.point("embed")
            before = getattr(embedder, "calls", None)
            out = embedder.embed(texts)
            if out.shape != (len(texts), embedder.dim):
                raise EmbeddingError(f"embedder returned shape {out.shape} for {len(texts)} texts of dim {embedder.dim}")
            # model calls as the embedder counts them (sub-batches, HTTP requests), else one per call
            stats.calls += getattr(embedder, "calls") - before if before is not None else 1
            for i, vec in zip(batch, out):
                vectors[todo[i].text_hash] = vec
    stats.embedded = len(chunks) - stats.reused
    return vectors, stats
