"""Python's cyclic garbage collector paused while a run builds its per-file records.

Discovery, the plan and the permission plan build a record (or a tuple) per file — 50,000 of
each for a million chunks — and free none of them until the run ends. The cyclic collector runs
on allocation counts, so it walks these young objects again and again while they are built, for
nothing: they hold no reference cycles. Measured on the 50,000 files of ``bench/scale.py
--chunks 1000000`` (the catalog read, the known-files map and discovery in one new process):
0.60–0.62 s with the collector, 0.48–0.49 s with the imports frozen out of its reach (as the
warm process of ``quarry serve`` has them), 0.44–0.45 s paused. In the bench's forked runs
(``--reuse --rows no_change,edit_1``, three rounds alternating with the code before), the
discover stage went from 0.50–0.58 s to 0.48–0.52 s and ``no_change`` from 0.88–0.95 s to
0.84–0.87 s. Objects that do form cycles meanwhile are collected once it runs again.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Disable the cyclic collector for the block, unless it is already off (nested blocks, or a
    caller that turned it off itself: that caller keeps it off)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
