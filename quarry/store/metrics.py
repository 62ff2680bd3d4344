"""The run facts of a store for its Prometheus metrics (:mod:`quarry.core.metrics`): the last run
(the catalog's and the journal's, as ``quarry runs`` lists them), the committed generation and
when it was committed, and the bytes a run wrote."""

from __future__ import annotations

import os
from pathlib import Path

from quarry.core.metrics import RunFacts
from quarry.store.handle import Store, as_store
from quarry.store.pointer import read_pointer

__all__ = ["run_facts", "written_since"]


def run_facts(
    store: Store | str | os.PathLike[str],
    schedule_seconds: float | None = None,
    last_run: dict | None = None,
    bytes_written: int | None = None,
) -> RunFacts:
    """The facts of ``store`` now; ``last_run`` when the caller has the row at hand (a run that just ended)."""
    from quarry.store import journal, views
    from quarry.store.reader import open_snapshot

    store = as_store(store)
    if store.remote is not None:
        store.remote.pull(store.folder, max_age=5.0)
    pointer = read_pointer(store.folder)
    if last_run is None:
        if pointer is not None:
            snap = open_snapshot(store.folder, search_index=False)
            try:
                rows = views.runs(snap.con, store, 1)
            finally:
                snap.close()
        else:
            rows = sorted(journal.pending(store), key=lambda r: r.get("started") or "", reverse=True)
        last_run = rows[0] if rows else None
    return RunFacts(
        last_run=last_run,
        committed_at=pointer.committed_at if pointer else None,
        generation=pointer.generation if pointer else None,
        schedule_seconds=schedule_seconds,
        bytes_written=bytes_written,
    )


def written_since(store: Store | Path, since: float) -> int:
    """Bytes of the store folder's files written at or after ``since`` (a Unix time): what a run wrote
    (for a store on object storage, what it wrote to its local cache before uploading it)."""
    total = 0
    for folder, _, names in os.walk(as_store(store).folder):
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:  # removed by a commit meanwhile
                continue
            if st.st_mtime >= since:
                total += st.st_size
    return total
