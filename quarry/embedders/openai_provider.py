"""Embeddings from any OpenAI-compatible API (OpenAI, Azure, vLLM, Ollama, llama.cpp server)."""

from __future__ import annotations

import numpy as np

from quarry.embedders.base import normalise
from quarry.errors import EmbeddingError

DEFAULT_MODEL = "text-embedding-3-small"
_KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}


def known_dim(model: str) -> int:
    """The native dimension of a well-known model; 0 when unknown (found on first call)."""
    return _KNOWN_DIMS.get(model, 0)


class OpenAIEmbedder:
    """Embeds through the ``openai`` client; key, base URL and model come from settings."""

    backend = "openai"
    max_tokens = 8191

    def __init__(self, model=None, dimensions=None, base_url=None, api_key=None, timeout=60.0, max_retries=5):
        self.model = model or DEFAULT_MODEL
        self.requested_dim = dimensions
        self.dim = dimensions or known_dim(self.model)
        self._client_args = {"base_url": base_url, "api_key": api_key or "unused", "timeout": timeout,
                             "max_retries": max_retries}
        self._client = None
        self.calls = 0

    def _get_client(self):
        if self._client is None:
            import openai

            self._client = openai.OpenAI(**self._client_args)
        return self._client

    def embed(self, texts: list[str]) -> np.ndarray:
        import openai

        kwargs = {"model": self.model, "input": texts}
        if self.requested_dim:
            kwargs["dimensions"] = self.requested_dim
        try:
            response = self._get_client().embeddings.create(**kwargs)
        except openai.APIError as exc:  # the client already retried 429/5xx with backoff
            raise EmbeddingError(f"embedding API error from {self.model}: {type(exc).__name__}: {exc}") from None
        self.calls += 1
        data = sorted(response.data, key=lambda d: d.index)
        vectors = np.asarray([d.embedding for d in data], dtype=np.float32)
        if vectors.shape[0] != len(texts):
            raise EmbeddingError(f"embedding API returned {vectors.shape[0]} vectors for {len(texts)} inputs")
        if self.requested_dim and vectors.shape[1] > self.requested_dim:
            vectors = vectors[:, : self.requested_dim]  # Matryoshka truncation by a server that ignored it
        if self.dim and vectors.shape[1] != self.dim:
            raise EmbeddingError(f"embedding API returned {vectors.shape[1]}-d vectors, expected {self.dim}")
        self.dim = vectors.shape[1]
        return normalise(vectors)

    def count_tokens(self, texts: list[str]) -> list[int]:
        # No tokenizer for arbitrary hosted models; ~4 characters per token is the usual bound.
        return [len(t) // 4 + 1 for t in texts]
