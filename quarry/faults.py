"""Fault injection for crash tests: ``QUARRY_FAULT=<point>`` SIGKILLs the process there.

The points sit where a real crash would hurt most (mid-embedding, between the LanceDB and the
DuckDB writes, during the FTS rebuild, right before and after the commit rename). Unset, a
check costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = ("embed", "after-vectors", "after-catalog", "fts", "before-commit", "after-commit")


def point(name: str) -> None:
    """Die here, as ``kill -9`` would, when ``QUARRY_FAULT`` names this point."""
    if os.environ.get("QUARRY_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
