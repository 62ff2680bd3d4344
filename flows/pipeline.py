"""The batch pipeline of an index run: process -> embed on a task runner, load in the flow's process.

::

    flow's process                                   task runner (threads, processes, Dask, Ray)
    ──────────────                                   ───────────────────────────────────────────
    submit process-files(files, settings) ─────────▶ parse, section, context, chunk  ─┐
    ◀───────────────────────────── ProcessedBatch (records, errors, timings) ◀───────┘
    stored vectors by text hash (committed table)
    submit embed(missing texts, settings) ─────────▶ embed with the worker's cached model ─┐
    ◀──────────────────────────────────────── EmbeddedTexts (float32 rows) ◀───────────────┘
    load(records, vectors) into the writer

At most ``in_flight`` batches are between submission and load at any time (back-pressure: the
next batch is submitted only when one has loaded), so the flow's memory is bounded by that
many batches whatever the corpus; results are handled in the order they complete. The one
writer stays in the flow's process, and the commit protocol is unchanged.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prefect.utilities.annotations import quote
from quarry.tasks.embed import embed_batch
from quarry.tasks.load import load_batch
from quarry.tasks.process import process_batch

from quarry.core.models import DocumentRecord, FileError, FileInfo, StageClock
from quarry.ingest.embedding import EmbedPlan, EmbedStats, plan_embedding


class unwalked(quote):
    """Prefect's ``quote`` (do not walk this value looking for futures: a batch holds thousands of
    chunks) that survives pickling. Prefect's own is a tuple subclass that pickles as a tuple's
    contents and unpickles as ``quote((value,))``, so a Dask or process-pool task would receive a
    1-tuple instead of its argument."""

    __slots__ = ()

    def __reduce__(self):
        return (type(self), (self[0],))


@dataclass
class Totals:
    """What the batches of a run added up to."""

    chunks: int = 0
    errors: list[FileError] = field(default_factory=list)
    empty: list[FileInfo] = field(default_factory=list)
    embed: EmbedStats = field(default_factory=EmbedStats)
    ocr_pages: int = 0
    ocr_seconds: float = 0.0
    llm: dict = field(default_factory=dict)

    def add_llm(self, report: dict) -> None:
        for key, value in report.items():
            if isinstance(value, list):
                self.llm.setdefault(key, []).extend(value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                self.llm[key] = self.llm.get(key, 0) + value


@dataclass
class _Batch:
    items: list[tuple[FileInfo, str]]
    records: list[DocumentRecord] = field(default_factory=list)
    plan: EmbedPlan | None = None


def run_batches(
    runner,
    batches: Iterable[list[tuple[FileInfo, str]]],
    *,
    settings,
    run_id: str,
    in_flight: int,
    parse_workers: int,
    store: str,
    lookup: Callable[[list[str]], dict],
    open_writer: Callable[[], object],
    clock: StageClock,
    on_done: Callable[[int, int, int], None] = lambda files, chunks, ocr_pages: None,
) -> Totals:
    """Run every batch through process -> embed -> load; returns the totals.

    ``runner`` is a started Prefect task runner; ``lookup`` returns stored vectors by text hash;
    ``open_writer`` opens the run's writer (at the first batch with something to load);
    ``on_done(files, chunks, ocr_pages)`` is called after each batch with the run's totals so far
    (the progress display).
    """
    totals = Totals()
    done: queue.SimpleQueue = queue.SimpleQueue()
    pending = iter(batches)
    outstanding = 0
    more = True

    def submit(task, parameters: dict, stage: str, batch: _Batch) -> None:
        future = runner.submit(task, {k: unwalked(v) for k, v in parameters.items()})
        future.add_done_callback(lambda f: done.put((stage, batch, f)))

    def load(batch: _Batch, vectors: dict) -> None:
        nonlocal outstanding
        if batch.records:
            open_writer()
            with clock.timing("load", sum(len(r.chunks) for r in batch.records)):
                totals.chunks += load_batch(run_id, unwalked(batch.records), unwalked(vectors))
        outstanding -= 1
        on_done(len(batch.items), totals.chunks, totals.ocr_pages)

    while True:
        while more and outstanding < in_flight:
            items = next(pending, None)
            if items is None:
                more = False
                break
            outstanding += 1
            submit(
                process_batch,
                {"items": items, "settings": settings, "workers": parse_workers, "store": store},
                "process",
                _Batch(items),
            )
        if outstanding == 0:
            return totals
        stage, batch, future = done.get()
        result = future.result()  # a failed task fails the run here; nothing of it was loaded
        if stage == "process":
            batch.records = result.records
            totals.errors += result.errors
            totals.empty += result.empty
            totals.ocr_pages += sum(r.ocr_pages for r in result.records)
            totals.ocr_seconds += sum(r.ocr_seconds for r in result.records)
            totals.add_llm(result.llm)
            clock.merge(result.spans, result.rows)
            with clock.timing("embed"):  # stored vectors first: part of the embed stage
                batch.plan = plan = plan_embedding(batch.records, lookup)
            totals.embed.add(plan.stats)
            if plan.texts:
                submit(
                    embed_batch, {"texts": plan.texts, "n_tokens": plan.n_tokens, "settings": settings}, "embed", batch
                )
            else:
                load(batch, plan.vectors)
        else:
            plan = batch.plan
            clock.add("embed", result.seconds, len(plan.texts), start=result.started)
            totals.embed.calls += result.calls
            load(batch, {**plan.vectors, **dict(zip(plan.hashes, result.vectors))})
