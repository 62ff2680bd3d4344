"""Fault injection for crash tests: ``QUARRY_FAULT=<point>`` SIGKILLs the process there.

The points sit where a real crash would hurt most (mid-embedding, between the LanceDB and the
DuckDB writes, during the FTS rebuild, after the commit merged catalog layers or wrote a new base,
right before and after the commit rename). Unset, a
check costs one dictionary lookup.

``QUARRY_FAULT=pause:<point>`` with ``QUARRY_FAULT_FILE=<path>`` instead stops there until
``<path>`` exists (``<path>.paused`` says it is waiting, at most 10 minutes): a test can then
damage the store mid-run (make it read-only, fill the disk) at a known moment.
"""

from __future__ import annotations

import os
import signal
import time

POINTS = ("embed", "after-vectors", "after-catalog", "fts", "after-merge", "before-commit", "after-commit")
# Two more points only some runs pass, named by their own tests: "after-upload" (a store on object
# storage: the generation's files uploaded, CURRENT not yet moved) and "before-read" (a root on
# object storage: a batch's objects listed and planned, not read yet).


def point(name: str) -> None:
    """Die here, as ``kill -9`` would, when ``QUARRY_FAULT`` names this point."""
    fault = os.environ.get("QUARRY_FAULT")
    if fault is None:
        return
    if fault == name:
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == f"pause:{name}":
        release = os.environ["QUARRY_FAULT_FILE"]
        open(release + ".paused", "w").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
