"""The maintenance flow: compaction, index rebuilds, the merge of catalog layers and index
segments, retention and a consistency check.

Schedule it as a deployment (``prefect.yaml``: ``quarry-maintain``) next to the index flow; it
takes the same writer lock (the lease on object storage), so it never runs during an index run:
with ``if_busy="skip"`` it stands down and tries again at its next slot.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed

from quarry.core.errors import StoreLocked
from quarry.store import audit
from quarry.store.handle import open_store
from quarry.store.maintain import audit_facts
from quarry.store.layout import WriterLock
from quarry.tasks.maintain import check_store, compact_vectors, merge_layers, rebuild_indices, remove_old_generations


@flow(name="quarry-maintain", log_prints=False, validate_parameters=False)
def maintain_flow(db: str | None = None, keep_generations: int | None = None, keep_versions_hours: float | None = None,
                  reindex_share: float | None = None, if_busy: str = "skip"):
    """Maintain the store at ``db``; returns the report :func:`quarry.store.maintain.maintain` would."""
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
        report = {"store": db or folder, "status": "completed",
                  "compaction": compact_vectors(folder, keep_versions_hours),
                  "indices": rebuild_indices(folder, reindex_share),
                  "merge": merge_layers(folder),
                  "removed": remove_old_generations(folder, keep_generations)}
    finally:
        lock.release()
    report["check"] = check_store(folder)
    audit.record(store, "maintain", audit_facts(report))
    c = report["compaction"]
    create_markdown_artifact(key="quarry-maintain", description="quarry maintenance run", markdown="\n".join([
        "| step | result |", "|---|---|",
        f"| fragments | {c['fragments_before']} → {c['fragments_after']} |",
        f"| LanceDB versions | {c['versions_before']} → {c['versions_after']} |",
        f"| indices rebuilt | {sum(i['rebuilt'] for i in report['indices'])} of {len(report['indices'])} |",
        f"| catalog layers, index segments | {report['merge']['layers_before']} → "
        f"{1 if report['merge']['merged'] else report['merge']['layers_before']} |",
        f"| files removed | {len(report['removed'])} |",
        f"| consistency | {'healthy' if report['check']['healthy'] else 'PROBLEMS: run quarry doctor'} |",
    ]))
    return report
