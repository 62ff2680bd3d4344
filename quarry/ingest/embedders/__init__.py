"""Embedding backends. ``get_embedder(settings)`` returns a process-wide cached instance.

Backends register themselves in :data:`EMBEDDERS` (``quarry.ingest.embedders.base``); this
package only caches what they build.
"""

from __future__ import annotations

import hashlib
import threading

from quarry.ingest.embedders.base import EMBEDDERS, Embedder, batches_by_budget, normalise

__all__ = ["EMBEDDERS", "Embedder", "batches_by_budget", "get_embedder", "normalise", "describe", "describe_backend"]

_cache: dict[tuple, Embedder] = {}
_lock = threading.Lock()


_OPENAI_FIELDS = (
    "openai_base_url",
    "embed_concurrency",
    "embed_rate_limit",
    "embed_token_rate_limit",
    "embed_max_inputs",
    "embed_request_tokens",
    "openai_timeout",
    "openai_attempts",
)


def _key(settings) -> tuple[object, ...]:
    key: tuple[object, ...] = (
        settings.embed_backend,
        settings.embed_model,
        settings.embed_dim,
        getattr(settings, "embed_threads", 0),
    )
    if settings.embed_backend == "openai":
        key += tuple(getattr(settings, name, None) for name in _OPENAI_FIELDS)
        key += (hashlib.sha256(settings.openai_api_key.encode()).hexdigest(),)  # a new key, a new client
    option_key = getattr(settings, "option_key", None)  # a component's own options (quarry.core.options)
    return key + (option_key(EMBEDDERS, settings.embed_backend) if option_key else ())


def describe(settings) -> tuple[str, int]:
    """The (model, dim) that ``settings`` embed into, without loading any model.

    ``dim`` is 0 for a hosted model of unknown size until its first call.
    """
    embedder = get_embedder(settings)
    return embedder.model, embedder.dim


def describe_backend(settings) -> dict:
    """The backend ``settings`` embed queries with and, for the ONNX ones, which cached model
    variant it runs (``int8`` variant or ``fp32`` fallback, and its self-check against fp32).
    Builds and loads nothing."""
    describe_model = EMBEDDERS.info(settings.embed_backend).get("describe")
    if describe_model is not None:
        return describe_model(settings.embed_backend)
    return {"backend": settings.embed_backend, "variant": None}


def get_embedder(settings) -> Embedder:
    """The embedder ``settings`` ask for; constructed once per process, loaded lazily.

    A task calls this inside the process that runs it, so that a Dask or Ray worker loads the
    model once and reuses it for every batch it embeds.
    """
    factory = EMBEDDERS.get(settings.embed_backend)  # an unknown name fails here, listing the known ones
    key = _key(settings)
    with _lock:
        if key not in _cache:
            _cache[key] = factory(settings)
        return _cache[key]
