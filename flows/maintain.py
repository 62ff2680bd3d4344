"""The maintenance flow: compaction, index rebuilds, the merge of catalog layers and index
segments, retention, DuckDB's full-text tables and a consistency check — the steps of
:func:`quarry.store.maintain.maintain` (``quarry maintain``), in its order, each a task over the same
plain function, and the same report.

Schedule it as a deployment (``prefect.yaml``: ``quarry-maintain``) next to the index flow; it
takes the same writer lock (the lease on object storage), so it never runs during an index run:
with ``if_busy="skip"`` it stands down and tries again at its next slot.
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed
from quarry.tasks.maintain import (
    build_full_text,
    check_store,
    compact_vectors,
    merge_layers,
    rebuild_indices,
    remove_old_generations,
)

from quarry.core.errors import StoreLocked
from quarry.store import audit
from quarry.store.handle import open_store
from quarry.store.layout import WriterLock
from quarry.store.maintain import audit_facts


@flow(name="quarry-maintain", log_prints=False, validate_parameters=False)
def maintain_flow(
    db: str | None = None,
    keep_generations: int | None = None,
    keep_versions_hours: float | None = None,
    reindex_share: float | None = None,
    if_busy: str = "skip",
    full_text: bool | None = None,
):
    """Maintain the store at ``db``; returns the report :func:`quarry.store.maintain.maintain` would.
    ``full_text``: build DuckDB's full-text tables (default: ``QUARRY_DUCKDB_FTS``)."""
    t0 = time.perf_counter()
    logger = get_run_logger()
    store = open_store(db)
    folder = str(store.folder)  # tasks get a path: plain, picklable data
    try:
        lock = WriterLock(store).acquire()
    except StoreLocked as exc:
        if if_busy != "skip":
            raise
        logger.info("store busy, maintenance skipped: %s", exc)
        return Completed(message=f"skipped: {exc}", name="Skipped")
    try:
        report = {
            "store": db or folder,
            "status": "completed",
            "compaction": compact_vectors(folder, keep_versions_hours, keep_generations),
            "indices": rebuild_indices(folder, reindex_share),
            "merge": merge_layers(folder),
            "removed": remove_old_generations(folder, keep_generations),
        }
        report["generation"] = report["merge"]["generation"]  # the committed one: nothing after merge commits
    finally:
        lock.release()
    # after the lock, as in quarry maintain: the build takes minutes and an index run may commit meanwhile
    report["full_text"] = build_full_text(folder, report["generation"], full_text)
    report["check"] = check_store(folder)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    audit.record(store, "maintain", audit_facts(report))
    c = report["compaction"]
    create_markdown_artifact(
        key="quarry-maintain",
        description="quarry maintenance run",
        markdown="\n".join(
            [
                "| step | result |",
                "|---|---|",
                f"| fragments | {c['fragments_before']} → {c['fragments_after']} |",
                f"| LanceDB versions | {c['versions_before']} → {c['versions_after']} |",
                f"| indices rebuilt | {sum(i['rebuilt'] for i in report['indices'])} of {len(report['indices'])} |",
                f"| catalog layers, index segments | {report['merge']['layers_before']} → "
                f"{1 if report['merge']['merged'] else report['merge']['layers_before']} |",
                f"| files removed | {len(report['removed'])} |",
                f"| DuckDB full-text tables | {report['full_text']['state']}"
                f"{' (built now)' if report['full_text'].get('built') else ''} |",
                f"| consistency | {'healthy' if report['check']['healthy'] else 'PROBLEMS: run quarry doctor'} |",
            ]
        ),
    )
    return report
