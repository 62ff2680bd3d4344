"""The embedding seam: every backend implements :class:`Embedder` and registers a factory in
:data:`EMBEDDERS` under its ``--embed-backend`` name."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from quarry.core.registry import EMBEDDERS  # noqa: F401 - name -> factory(settings, **keywords) -> Embedder
from quarry.retrieval.dense import normalise  # noqa: F401 - part of this seam's surface


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    ``model`` and ``dim`` identify the vector space and are stored with the index, so a query
    can never be embedded into a different space than the one it searches.
    """

    model: str
    dim: int
    max_tokens: int  # longest input the model reads without truncating; 0 when unknown

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` in one call; returns an array of shape (len(texts), dim), float32."""
        ...

    def count_tokens(self, texts: list[str]) -> list[int]:
        """How many model tokens each text costs (special tokens included)."""
        ...


def batches_by_budget(lengths: list[int], budget: int, max_items: int = 256) -> list[list[int]]:
    """Group item indices into batches whose summed length stays within ``budget``.

    Items are taken longest first so that each batch holds texts of similar length (less
    padding); an item longer than the budget gets a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i in order:
        if cur and (used + lengths[i] > budget or len(cur) >= max_items):
            out.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += lengths[i]
    if cur:
        out.append(cur)
    return out
