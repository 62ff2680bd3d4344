"""The index flow: discover -> plan -> (process -> embed -> load) per batch -> removals -> commit.

The flow only wires tasks: the batches stream through the run's task runner (threads by
default, or processes, Dask, Ray: ``flows/runners.py``, ``flows/pipeline.py``) and back to the
one writer in this process. Everything it writes goes to a new catalog generation and new
LanceDB versions, which become visible at the commit task's pointer rename.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from prefect import Flow, get_run_logger
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.states import Completed
from quarry.flows import report
from quarry.flows.pipeline import Totals, run_batches, unwalked
from quarry.flows.preview import preview
from quarry.flows.runners import FILES_PER_BATCH, plan_runner, task_runner, task_settings
from quarry.tasks.acl import apply_permissions, plan_run_permissions
from quarry.tasks.discover import discover_files, plan_changes
from quarry.tasks.embed import StoredVectors
from quarry.tasks.evaluate import evaluate_generation
from quarry.tasks.load import RunWriter, apply_removals_and_moves, commit_run

from quarry.core import logs, progress, tracing
from quarry.core.errors import QualityBelowThreshold, RunRefused
from quarry.core.models import StageClock
from quarry.core.paths import display
from quarry.core.settings import Settings
from quarry.core.storeurl import root_path
from quarry.ingest.embedders import describe, get_embedder
from quarry.ingest.guard import GuardLimits, pattern_flags
from quarry.ingest.process import content_fingerprint
from quarry.store import audit, journal
from quarry.store.acl import counts as acl_counts
from quarry.store.handle import open_store
from quarry.store.layout import new_run_id
from quarry.store.pointer import read_pointer
from quarry.store.upkeep import remove_debris

BYTES_PER_BATCH = 32 << 20


FIRST_BATCH = 8  # files in the first batch; each next one doubles, up to files_per_batch


def _batches(items, files_per_batch: int = FILES_PER_BATCH, bytes_per_batch: int = BYTES_PER_BATCH):
    """Batches of at most ``files_per_batch`` files and ``bytes_per_batch`` bytes. The first ones are
    smaller (8, 16, 32 … files): embedding starts sooner, and progress shows a rate and an ETA
    after a few seconds rather than after the first full batch."""
    batch: list[Any] = []
    size = 0
    limit = min(FIRST_BATCH, files_per_batch)
    for item in items:
        if batch and (len(batch) >= limit or size + item[0].size > bytes_per_batch):
            yield batch
            batch, size = [], 0
            limit = min(2 * limit, files_per_batch)
        batch.append(item)
        size += item[0].size
    if batch:
        yield batch


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class _CalledFlow(Flow):
    """A flow that, called directly (the CLI, a Python program, a notebook), runs without Prefect's
    flow-run heartbeat unless ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` asks for one.

    The heartbeat feeds Prefect's crashed-run detection, which needs server-side automation that
    a direct call's caller does not use (it sees the failure itself). Its thread sleeps in one
    second steps and the run waits for it to stop: up to a second at the end of every run, more
    than a run with nothing to do costs otherwise. Deployment runs (``quarry serve``) keep it.
    """

    def __call__(self, *args, **kwargs):
        # a caller that set it already (quarry.index, with its API URL: one settings copy, not two)
        if PREFECT_FLOWS_HEARTBEAT_FREQUENCY.value() is None or heartbeat_asked():
            return super().__call__(*args, **kwargs)
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            return super().__call__(*args, **kwargs)


def heartbeat_asked() -> bool:
    """Whether the environment asks for Prefect's flow-run heartbeat (see :class:`_CalledFlow`)."""
    return any(os.environ.get(v) for v in ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY"))


def _flow(**options):
    """``@flow(...)``, making a :class:`_CalledFlow`."""
    return lambda fn: _CalledFlow(fn=fn, **options)


@_flow(name="quarry-index", log_prints=False, validate_parameters=False)
def index_flow(
    roots: list[str],
    db: str | None = None,
    full: bool = False,
    dry_run: bool = False,
    overrides: dict | None = None,
    if_busy: str = "fail",
    evaluate: dict | None = None,
):
    """Index ``roots`` into the store at ``db``; returns the run report: the fields of
    :class:`~quarry.core.models.RunReport` (the ``runs`` row) plus ``plan`` and ``rebuild``.

    ``overrides`` are :class:`~quarry.core.settings.Settings` fields; secrets come only from the
    environment so that they never appear in flow-run parameters. ``if_busy``: what to do when
    another run holds the store — ``fail`` (raise :class:`StoreLocked`) or ``skip`` (record a
    ``skipped`` run and finish; what scheduled runs do, so that a run longer than the interval
    never meets a second writer; a tick that meets its own schedule's initial run finishes
    skipped without a row).

    ``evaluate``: after the run, score question sets of the store on the committed generation
    (``{"sets": [names], "margin": 0.05, "modes": ["hybrid"], "k": 10, "fail": True}``; see
    :func:`quarry.eval.scoring.evaluate_generation`); a metric more than ``margin`` below the previous
    generation's is flagged in the ``evals`` table and, with ``fail``, fails the run
    (:class:`~quarry.core.errors.QualityBelowThreshold`) after its commit.
    """
    logger = get_run_logger()
    settings = Settings.from_env(**(overrides or {}))
    store = open_store(db)  # opened once: the lock, the journal and the writer share it
    roots = [root_path(r) for r in roots]
    if dry_run:  # the one dry-run path, the one `quarry index --dry-run` takes without Prefect
        return preview(roots, store.folder, settings, full=full)
    run_id, started = new_run_id(), _now()
    lock, skipped = journal.hold_or_skip(
        store, if_busy, run_id, started, [display(r) for r in roots], settings.public_dict(), _owner()
    )
    if skipped is not None:
        logger.info("run %s skipped: %s", run_id, skipped["errors"][0]["error"])
        report.write_metrics(store, started)
        return Completed(message=f"skipped: {skipped['errors'][0]['error']}", name="Skipped", data=skipped)
    assert lock is not None  # hold_or_skip gives the lock or the skipped row
    try:
        with (
            tracing.span("quarry.index", **{"quarry.run_id": run_id, "quarry.roots": len(roots)}),
            logs.bind(run_id=run_id),
        ):
            out = _index(logger, settings, store, roots, run_id, started, full)
    finally:
        lock.release()
        report.write_metrics(store, started)
    if evaluate and evaluate.get("sets"):
        _evaluate(str(store.folder), evaluate)
    return out


INITIAL_RUN_TAG = "initial-run"  # the tag of the run `quarry serve` starts before the first tick


def _owner() -> dict:
    """This flow run's deployment, and whether it is the initial run ``quarry serve`` starts at once
    (tagged ``initial-run``), for the writer lock: a tick of the schedule that meets its own initial
    run is not a skipped run (:func:`quarry.store.journal.hold_or_skip`). Read from the run's own
    context, never through the API (``prefect.runtime.deployment.id`` asks the server for a run
    outside a deployment); empty outside a deployment or a flow run."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or run.deployment_id is None:
        return {}
    return {"deployment": str(run.deployment_id), "initial_run": INITIAL_RUN_TAG in (run.tags or [])}


def _evaluate(store: str, options: dict) -> dict:
    """The evaluation after a run (outside the writer lock: it only reads the committed generation)."""
    out = evaluate_generation(
        store,
        list(options["sets"]),
        float(options.get("margin", 0.05)),
        list(options.get("modes") or ["hybrid"]),
        int(options.get("k", 10)),
    )
    if out["flagged"] and options.get("fail", True):
        raise QualityBelowThreshold("quality dropped below the previous generation's: " + "; ".join(out["flagged"]))
    return out


def _index(logger, settings, opened, roots, run_id, started, full) -> dict:
    """The run's tasks, wired: discover, plan, the batches, removals and moves, the commit."""
    store = opened.folder  # what tasks are given: a path travels to workers, the opened store does not
    clock = StageClock()
    model, dim = describe(settings)
    if not dim:
        embedder = get_embedder(settings)
        embedder.embed(["dimension probe"])  # hosted model of unknown size: ask once
        model, dim = embedder.model, embedder.dim
    writer = RunWriter(opened, run_id, model, dim, settings)
    committed = read_pointer(store) is not None
    try:
        # unwalked(): these are plain lists of thousands of files; Prefect need not walk them for futures
        with clock.timing("discover"):
            found = discover_files(roots, settings.include, settings.exclude, store, full or settings.rehash)
        clock.rows["discover"] += len(found.files) + len(found.unsupported) + len(found.unreadable)
        with clock.timing("plan", len(found.files)):
            planned = plan_changes(
                store,
                unwalked(found),
                full,
                content_fingerprint(settings),
                model,
                dim,
                GuardLimits.from_settings(settings),
                pattern_flags(settings.include, settings.exclude),
            )
        plan, verdict = planned.plan, planned.verdict
        permissions = plan_run_permissions(
            store,
            unwalked(found.files),
            roots,
            settings.acl,
            settings.acl_rules,
            unwalked({f.path for f, _ in plan.to_process}),
        )
        if verdict.refused:
            refused = report.refused(run_id, started, settings, roots, found, planned, clock)
            journal.record_run(opened, refused.finished_with(commit_seconds=0.0))
            audit.record(
                opened, "guard.refused", {"run_id": run_id, "roots": refused.roots, "reasons": verdict.refusals}
            )
            report.artifact({**refused.to_dict(), "plan": plan.counts()})
            raise RunRefused(verdict.message())

        totals = _process(logger, settings, opened, run_id, plan.to_process, model, dim, writer, clock)
        existing = {doc_id for _, doc_id in plan.changed}
        empty_paths = {f.path for f in totals.empty}
        empty_existing = [doc_id for f, doc_id in plan.to_process if f.path in empty_paths and doc_id in existing]
        with clock.timing("load"):
            # A new store is committed even when empty (it then answers searches), unless every root failed.
            new_store = not committed and (plan.to_process or not verdict.failures)
            if new_store or planned.rebuild or plan.removed or plan.moved or empty_existing or permissions.needs_writer:
                writer()
            acl_before = acl_counts(store) if permissions.changed else None
            if writer.is_open:
                apply_removals_and_moves(run_id, unwalked(plan), empty_existing)
                apply_permissions(run_id, unwalked(permissions))
        done = report.finished(
            run_id, started, settings, roots, found, planned, totals, empty_existing, permissions.changed, clock
        )
        if writer.is_open:
            _info, done = commit_run(run_id, unwalked(done), report.commit_meta(settings))
        else:
            # Nothing to write (unchanged files, touched ones included: their new mtimes are
            # recorded by the next run that commits; failures are listed in the row).
            t = time.perf_counter()
            remove_debris(store)  # what a killed run left, as a writer would on opening
            done = done.finished_with(commit_seconds=time.perf_counter() - t)
            journal.record_run(opened, done)
        report.audit_run(opened, done, verdict, acl_before)
        out = {
            **done.to_dict(),
            "dry_run": False,
            "plan": plan.counts(),
            "rebuild": planned.rebuild,
            "reparsed_formats": planned.reparsed,
        }
        report.artifact(out)
        report.log_summary(logger, done, out, settings.uses_llm)
        return out
    finally:
        writer.close()


def _process(logger, settings, opened, run_id, todo, model, dim, writer, clock) -> Totals:
    """The batches of the files to process through the run's task runner (none when there are
    none: no pool, no cluster), each loaded through ``writer`` as it finishes."""
    if not todo:
        return Totals()
    runner_plan = plan_runner(settings)
    logger.info(
        "runner %s: %d workers, at most %d batches in flight, %d files per batch",
        runner_plan.name,
        runner_plan.workers,
        runner_plan.in_flight,
        runner_plan.files_per_batch,
    )
    bar = progress.start("indexing", total=len(todo))
    try:
        with task_runner(settings, runner_plan) as runner:
            return run_batches(
                runner,
                _batches(todo, runner_plan.files_per_batch),
                settings=task_settings(settings, runner_plan),
                run_id=run_id,
                in_flight=runner_plan.in_flight,
                parse_workers=runner_plan.parse_workers,
                store=str(opened.folder),
                lookup=StoredVectors(opened, model, dim).lookup,
                open_writer=writer,
                clock=clock,
                on_done=lambda n, chunks, ocr: bar.advance(n, chunks=chunks, ocr_pages=ocr),
            )
    finally:
        bar.stop()
