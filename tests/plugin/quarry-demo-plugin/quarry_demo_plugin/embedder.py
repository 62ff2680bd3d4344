"""The `demo` embedding backend: character trigrams hashed into 48 dimensions (no model)."""

import hashlib

import numpy as np

from quarry.core.registry import EMBEDDERS


class DemoEmbedder:
    model = "demo-trigrams"
    dim = 48
    max_tokens = 0

    def embed(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            low = text.lower()
            for i in range(max(1, len(low) - 2)):
                out[row, hashlib.md5(low[i : i + 3].encode()).digest()[0] % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]


@EMBEDDERS.register("demo")
def _demo(settings, **kwargs):
    return DemoEmbedder()
