"""A dependency-free embedder for tests and smoke runs: feature hashing of BM25 tokens.

It has no semantic quality (synonyms do not meet), but it is deterministic, instant and
exercises every code path of the vector side. Select it with ``--embed-backend hash``.
"""

from __future__ import annotations

import hashlib

import numpy as np

from quarry.ingest.embedders.base import EMBEDDERS, normalise
from quarry.retrieval.textnorm import tokens


class HashEmbedder:
    backend = "hash"

    def __init__(self, dim: int = 64, max_tokens: int = 256):
        self.model = f"quarry-hash-{dim}"
        self.dim = dim
        self.max_tokens = max_tokens
        self.calls = 0
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for tok in tokens(text):
                h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) else -1.0
        return normalise(out)

    def count_tokens(self, texts: list[str]) -> list[int]:
        # Word-piece tokenizers split words further; 1.3 tokens per word is a fair bound.
        return [int(len(tokens(t)) * 1.3) + 2 for t in texts]


@EMBEDDERS.register("hash")
def _hash(settings=None, **kw) -> HashEmbedder:
    return HashEmbedder(dim=(settings.embed_dim if settings else 0) or 64, **kw)
