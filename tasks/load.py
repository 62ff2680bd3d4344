"""Write to the store: document batches, deletions and moves, and the commit."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.core.models import DocumentRecord
from quarry.ingest.plan import Plan
from quarry.store.catalog import utc_timestamp


@task(name="load", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def load_batch(writer, records: list[DocumentRecord], vectors: dict, run_id: str) -> int:
    """Replace these documents in LanceDB and the new catalog generation (repeatable)."""
    writer.write_documents(records, vectors, run_id)
    n = sum(len(r.chunks) for r in records)
    get_run_logger().info("loaded %d documents, %d chunks", len(records), n)
    return n


@task(name="apply-removals-and-moves", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def apply_removals_and_moves(writer, plan: Plan, extra_deletes: list[str], run_id: str) -> None:
    writer.delete_documents([d.doc_id for d in plan.removed] + extra_deletes)
    for file, doc_id, _old in plan.moved:
        writer.move_document(doc_id, file.path, file.root, file.rel_path, utc_timestamp(file.mtime), run_id)
    writer.touch_documents([(doc_id, utc_timestamp(f.mtime)) for f, doc_id in plan.touched])
    get_run_logger().info("deleted %d documents, moved %d", len(plan.removed) + len(extra_deletes), len(plan.moved))


@task(name="commit", cache_policy=NO_CACHE)
def commit_run(writer, run_row: dict, meta: dict):
    """Rebuild BM25, record the run and swing the pointer: the run becomes visible here."""
    info = writer.commit(run_row, meta)
    get_run_logger().info("committed generation %d (vector version %d) in %.2f s", info.generation,
                          info.vector_version, info.seconds)
    return info
