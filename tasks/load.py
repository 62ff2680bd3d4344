"""Write to the store: document batches, deletions and moves, and the commit.

The writer holds the lock and the run's new catalog generation, so it never leaves the flow's
process: these tasks take the run id, not the writer, and find the run's writer in this process
(:func:`attach_writer`). The flow calls them directly, never through ``.submit``.
"""

from __future__ import annotations

import os

import numpy as np
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.core.errors import QuarryError
from quarry.core.models import DocumentRecord, RunReport
from quarry.core.plans import Plan
from quarry.store.catalog import utc_timestamp
from quarry.store.writer import CommitInfo, StoreWriter

_writers: dict[str, StoreWriter] = {}


def attach_writer(run_id: str, writer: StoreWriter) -> None:
    """Make ``writer`` the one the load and commit tasks of ``run_id`` use in this process."""
    _writers[run_id] = writer


def detach_writer(run_id: str) -> None:
    _writers.pop(run_id, None)


class RunWriter:
    """A run's writer (a new catalog layer), opened only once there is something to write: a run
    with nothing to do records its row in the run journal and writes no generation. Opened, it is
    the one :func:`load_batch`, :func:`apply_removals_and_moves` and :func:`commit_run` of the
    run find; :meth:`close` lets it go."""

    def __init__(self, opened, run_id: str, model: str, dim: int, settings) -> None:
        self.opened, self.run_id, self.model, self.dim, self.settings = opened, run_id, model, dim, settings
        self.writer: StoreWriter | None = None

    def __call__(self) -> StoreWriter:
        """The writer, opened now if it is not yet."""
        if self.writer is None:
            from quarry.ingest.embedders import get_embedder
            from quarry.ingest.embedding import embed_texts

            settings = self.settings
            self.writer = StoreWriter(self.opened, self.model, self.dim, duckdb_fts=settings.duckdb_fts).open()
            # chunks QUARRY_BOILERPLATE=strip changes at commit are embedded here, with the run's model
            self.writer.embed = lambda texts: embed_texts(texts, get_embedder(settings)).vectors
            attach_writer(self.run_id, self.writer)
        return self.writer

    @property
    def is_open(self) -> bool:
        return self.writer is not None

    def close(self) -> None:
        if self.writer is not None:
            detach_writer(self.run_id)
            self.writer.close()
            self.writer = None


def _writer(run_id: str) -> StoreWriter:
    try:
        return _writers[run_id]
    except KeyError:
        raise QuarryError(
            f"run {run_id} has no open writer in process {os.getpid()}: load and commit tasks run "
            "in the flow's process, which owns the writer; call them, never submit them"
        ) from None


@task(name="load", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def load_batch(run_id: str, records: list[DocumentRecord], vectors: dict[str, np.ndarray]) -> int:
    """Replace these documents in LanceDB and the new catalog generation (repeatable)."""
    _writer(run_id).write_documents(records, vectors, run_id)
    n = sum(len(r.chunks) for r in records)
    get_run_logger().info("loaded %d documents, %d chunks", len(records), n)
    return n


@task(name="apply-removals-and-moves", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def apply_removals_and_moves(run_id: str, plan: Plan, extra_deletes: list[str]) -> None:
    writer = _writer(run_id)
    writer.delete_documents([d.doc_id for d in plan.removed] + extra_deletes)
    writer.move_documents(
        [
            (doc_id, file.path, file.root, file.rel_path, utc_timestamp(file.mtime), run_id)
            for file, doc_id, _old in plan.moved
        ]
    )
    writer.touch_documents([(doc_id, utc_timestamp(f.mtime), run_id) for f, doc_id in plan.touched])
    get_run_logger().info("deleted %d documents, moved %d", len(plan.removed) + len(extra_deletes), len(plan.moved))


@task(name="commit", cache_policy=NO_CACHE)
def commit_run(run_id: str, report: RunReport, meta: dict) -> tuple[CommitInfo, RunReport]:
    """Build the search index, record the run and swing the pointer: the run becomes visible here.

    Returns the commit and the report as written (with the commit's time and the finish time).
    """
    written = []

    def finish(seconds: float) -> RunReport:
        written.append(report.finished_with(commit_seconds=seconds))
        return written[0]

    info = _writer(run_id).commit(report, meta, finish=finish)
    get_run_logger().info(
        "committed generation %d (vector version %d) in %.2f s", info.generation, info.vector_version, info.seconds
    )
    return info, written[0]
