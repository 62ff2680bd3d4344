"""Deterministic top-n selection shared by the retrievers."""

from __future__ import annotations

import numpy as np


def top_n(values: np.ndarray, n: int, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``n`` largest ``values``, best first.

    Equal values are ordered by ``tiebreak`` ascending (default: position), including ties at
    the cut-off, so the same scores always give the same list. Linear time (a partition) plus a
    sort of the ``n`` kept.
    """
    values = np.asarray(values)
    if n <= 0 or len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    pos = np.arange(len(values), dtype=np.int64)
    if len(values) > n:
        cut = np.partition(values, len(values) - n)[len(values) - n]  # the n-th largest value
        pos = np.flatnonzero(values >= cut)  # at least n, more when values tie at the cut
    keys = pos if tiebreak is None else np.asarray(tiebreak)[pos]
    return pos[np.lexsort((keys, -values[pos]))[:n]]
