"""Embedding backends. ``get_embedder(settings)`` returns a process-wide cached instance."""

from __future__ import annotations

import threading

from quarry.embedders.base import Embedder, batches_by_budget, normalise

__all__ = ["Embedder", "batches_by_budget", "get_embedder", "normalise", "describe"]

_cache: dict[tuple, Embedder] = {}
_lock = threading.Lock()



def _key(settings) -> tuple:
    return (settings.embed_backend, settings.embed_model, settings.embed_dim, settings.openai_base_url)


def describe(settings) -> tuple[str, int]:
    """The (model, dim) that ``settings`` embed into, without loading any model.

    ``dim`` is 0 for a hosted model of unknown size until its first call.
    """
    embedder = get_embedder(settings)
    return embedder.model, embedder.dim


def get_embedder(settings) -> Embedder:
    """The embedder ``settings`` ask for; constructed once per process, loaded lazily."""
    key = _key(settings)
    with _lock:
        if key not in _cache:
            if settings.embed_backend == "openai":
                from quarry.embedders.openai_provider import OpenAIEmbedder

                _cache[key] = OpenAIEmbedder(
                    model=settings.embed_model or None,
                    dimensions=settings.embed_dim or None,
                    base_url=settings.openai_base_url or None,
                    api_key=settings.openai_api_key or None,
                )
            elif settings.embed_backend == "hash":
                from quarry.embedders.hashing import HashEmbedder

                _cache[key] = HashEmbedder(dim=settings.embed_dim or 64)
            else:
                from quarry.embedders.local import get_local_embedder

                _cache[key] = get_local_embedder(settings.embed_backend)
        return _cache[key]
