"""Turning what a caller passes to :meth:`quarry.Index.search` into what it runs on: a reranker
from a spec, segment parameters from a preset; each wrong value a
:class:`~quarry.core.errors.UsageError` that says what is expected. The arguments' names, limits
and plain checks are declared in :mod:`quarry.search.parameters`."""

from __future__ import annotations

from quarry.core.errors import UsageError
from quarry.search.rerank import Reranker, get_reranker
from quarry.search.segments import RseParams, get_params

__all__ = ["reranker_of", "segment_params", "short_id"]


def reranker_of(rerank) -> Reranker | None:
    """A reranker from a spec string or a ready object; None for no rerank."""
    if rerank is None or rerank == "":
        return None
    if isinstance(rerank, str):
        return get_reranker(rerank)
    if not callable(getattr(rerank, "rerank", None)):
        raise UsageError(
            f"rerank takes a spec (llm, llm:MODEL, cross-encoder:PATH) or an object with "
            f"rerank(query, results), got {type(rerank).__name__}"
        )
    return rerank


def segment_params(segments) -> RseParams | None:
    """Segment parameters from a preset name or :class:`RseParams`; None for no segments."""
    if segments is None:
        return None
    if isinstance(segments, RseParams):
        return segments.validate()
    if isinstance(segments, str):
        return get_params(segments)
    raise UsageError(f"segments takes a preset name or RseParams, got {type(segments).__name__}")


def short_id(value: str) -> str:
    """An id as an error message may show it: printable, at most 80 characters."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value))
    return repr(text if len(text) <= 80 else text[:77] + "...")
