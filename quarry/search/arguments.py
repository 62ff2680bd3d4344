"""Turning what a caller passes to :meth:`quarry.Index.search` into what it runs on: a reranker
from a spec, segment parameters from a preset, a window from ``"B,A"``, weights checked to be finite
numbers; each wrong value a :class:`~quarry.core.errors.UsageError` that says what is expected."""

from __future__ import annotations

import math

from quarry.core.errors import UsageError
from quarry.search.rerank import Reranker, get_reranker
from quarry.search.segments import RseParams, get_params
from quarry.search.windows import parse_window

__all__ = ["reranker_of", "segment_params", "window_of", "checked_numbers", "short_id"]


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


def window_of(window) -> tuple[int, int] | None:
    """``(before, after)`` from ``(b, a)``, one int for both sides, or ``"B,A"``; None for no window."""
    if window is None:
        return None
    if isinstance(window, int) and not isinstance(window, bool):
        window = (window, window)
    if isinstance(window, str):
        return parse_window(window)
    pair = tuple(window) if isinstance(window, (tuple, list)) else ()
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair):
        raise UsageError(f"window takes (before, after) as two non-negative integers, got {window!r}")
    return pair[0], pair[1]


def checked_numbers(name: str, value: dict | None, allowed: tuple[str, ...]) -> dict[str, float]:
    if not value:
        return {}
    unknown = set(value) - set(allowed)
    if unknown:
        raise UsageError(f"{name}: unknown key {', '.join(sorted(unknown))}; use {', '.join(allowed)}")
    out = {}
    for key, v in value.items():
        try:
            out[key] = float(v)
        except (TypeError, ValueError):
            raise UsageError(f"{name}: {key} must be a number, got {v!r}") from None
        if not math.isfinite(out[key]):
            raise UsageError(f"{name}: {key} must be finite, got {v!r}")
    return out


def short_id(value: str) -> str:
    """An id as an error message may show it: printable, at most 80 characters."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value))
    return repr(text if len(text) <= 80 else text[:77] + "...")
