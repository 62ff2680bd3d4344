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
from prefect.artifacts import create_markdown_artifact
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.states import Completed
from quarry.flows.pipeline import Totals, run_batches, unwalked
from quarry.flows.runners import FILES_PER_BATCH, plan_runner, task_runner, task_settings
from quarry.tasks.acl import apply_permissions, plan_run_permissions
from quarry.tasks.discover import discover_files, plan_changes
from quarry.tasks.embed import StoredVectors
from quarry.tasks.evaluate import evaluate_generation
from quarry.tasks.load import apply_removals_and_moves, attach_writer, commit_run, detach_writer

from quarry.core import logs, progress, tracing
from quarry.core.environment import environment
from quarry.core.errors import QualityBelowThreshold, RunRefused, StoreLocked, UsageError
from quarry.core.metrics import write_textfile
from quarry.core.models import LLM_COUNTERS, RunReport, StageClock
from quarry.core.paths import display
from quarry.core.settings import Settings
from quarry.core.storeurl import root_path
from quarry.ingest.embedders import describe, get_embedder
from quarry.ingest.embedding import embed_texts
from quarry.ingest.guard import GuardLimits, pattern_flags
from quarry.ingest.process import content_fingerprint, recorded_versions
from quarry.store import audit, journal
from quarry.store.acl import counts as acl_counts
from quarry.store.handle import open_store
from quarry.store.layout import WriterLock, new_run_id
from quarry.store.metrics import run_facts, written_since
from quarry.store.pointer import read_pointer
from quarry.store.writer import StoreWriter, remove_debris

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
    never meets a second writer).

    ``evaluate``: after the run, score question sets of the store on the committed generation
    (``{"sets": [names], "margin": 0.05, "modes": ["hybrid"], "k": 10, "fail": True}``; see
    :func:`quarry.eval.scoring.evaluate_generation`); a metric more than ``margin`` below the previous
    generation's is flagged in the ``evals`` table and, with ``fail``, fails the run
    (:class:`~quarry.core.errors.QualityBelowThreshold`) after its commit.
    """
    logger = get_run_logger()
    if if_busy not in ("fail", "skip"):
        raise UsageError(f"if_busy must be 'fail' or 'skip', got {if_busy!r}")
    settings = Settings.from_env(**(overrides or {}))
    store = open_store(db)  # opened once: the lock, the journal and the writer share it
    roots = [root_path(r) for r in roots]
    run_id = new_run_id()
    started = _now()
    lock = None
    if not dry_run:
        try:
            lock = WriterLock(store).acquire()  # before any model loads: a busy store costs nothing
        except StoreLocked as exc:
            if if_busy == "fail":
                raise
            row = journal.record_skip(
                store, run_id, started, [display(r) for r in roots], str(exc), settings.public_dict()
            )
            logger.info("run %s skipped: %s", run_id, exc)
            _write_metrics(store, started)
            return Completed(message=f"skipped: {exc}", name="Skipped", data=row)
    try:
        with (
            tracing.span("quarry.index", **{"quarry.run_id": run_id, "quarry.roots": len(roots)}),
            logs.bind(run_id=run_id),
        ):
            report = _index(logger, settings, store, roots, run_id, started, full, dry_run)
    finally:
        if lock is not None:
            lock.release()
        if not dry_run:
            _write_metrics(store, started)
    if evaluate and evaluate.get("sets") and not dry_run:
        _evaluate(str(store.folder), evaluate)
    return report


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


def _index(logger, settings, opened, roots, run_id, started, full, dry_run) -> dict:
    store = opened.folder  # what tasks are given: a path travels to workers, the opened store does not
    clock = StageClock()
    model, dim = describe(settings)
    if not dim:
        embedder = get_embedder(settings)
        embedder.embed(["dimension probe"])  # hosted model of unknown size: ask once
        model, dim = embedder.model, embedder.dim

    # The writer (a copy of the whole catalog) is opened only once there is something to write:
    # a run with nothing to do records its row in the run journal and copies nothing.
    writer = None
    committed = read_pointer(store) is not None

    def open_writer() -> StoreWriter:
        nonlocal writer
        if writer is None:
            writer = StoreWriter(opened, model, dim, duckdb_fts=settings.duckdb_fts).open()
            # chunks QUARRY_BOILERPLATE=strip changes at commit are embedded here, with the run's model
            writer.embed = lambda texts: embed_texts(texts, get_embedder(settings)).vectors
            attach_writer(run_id, writer)
        return writer

    try:
        # unwalked(): these are plain lists of thousands of files; Prefect need not walk them for futures
        with clock.timing("discover"):
            found = discover_files(roots, settings.include, settings.exclude, store, full or settings.rehash)
        files, unsupported = found.files, found.unsupported
        clock.rows["discover"] += len(files) + len(unsupported) + len(found.unreadable)
        with clock.timing("plan", len(files)):
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
        plan, rebuild_reason, verdict = planned.plan, planned.rebuild, planned.verdict
        permissions = plan_run_permissions(
            store,
            unwalked(files),
            roots,
            settings.acl,
            settings.acl_rules,
            unwalked({f.path for f, _ in plan.to_process}),
        )
        if dry_run:
            return {**planned.dry_run_report(run_id, found), "permissions": permissions.changed}
        if verdict.refused:
            report = RunReport(
                run_id=run_id,
                started=started,
                status="refused",
                runner=settings.runner,
                roots=[display(r) for r in roots],
                unsupported=len(unsupported),
                errors=[{"path": None, "error": r} for r in verdict.refusals],
                durations=clock.as_dict(),
                settings=settings.public_dict(),
                unsupported_files=found.unsupported_files(),
                message=verdict.message(),
            )
            journal.record_run(opened, report.finished_with(commit_seconds=0.0))
            audit.record(
                opened, "guard.refused", {"run_id": run_id, "roots": report.roots, "reasons": verdict.refusals}
            )
            _artifact({**report.to_dict(), "plan": plan.counts()})
            raise RunRefused(verdict.message())

        todo = plan.to_process
        totals = Totals()
        if todo:  # a run with nothing to process starts no runner: no pool, no cluster
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
                    totals = run_batches(
                        runner,
                        _batches(todo, runner_plan.files_per_batch),
                        settings=task_settings(settings, runner_plan),
                        run_id=run_id,
                        in_flight=runner_plan.in_flight,
                        parse_workers=runner_plan.parse_workers,
                        store=str(store),
                        lookup=StoredVectors(opened, model, dim).lookup,
                        open_writer=open_writer,
                        clock=clock,
                        on_done=lambda n, chunks, ocr: bar.advance(n, chunks=chunks, ocr_pages=ocr),
                    )
            finally:
                bar.stop()

        existing = {doc_id for _, doc_id in plan.changed}
        empty_paths = {f.path for f in totals.empty}
        empty_existing = [doc_id for f, doc_id in todo if f.path in empty_paths and doc_id in existing]
        errors = verdict.failures + found.unreadable + totals.errors
        with clock.timing("load"):
            # A new store is committed even when empty (it then answers searches), unless every root failed.
            new_store = not committed and (todo or not verdict.failures)
            if writer is None and (
                new_store or rebuild_reason or plan.removed or plan.moved or empty_existing or permissions.needs_writer
            ):
                open_writer()
            acl_before = acl_counts(store) if permissions.changed else None
            if writer is not None:
                apply_removals_and_moves(run_id, unwalked(plan), empty_existing)
                apply_permissions(run_id, unwalked(permissions))
        not_loaded = {e.path for e in errors} | empty_paths
        report = RunReport(
            run_id=run_id,
            started=started,
            status="partial" if errors else "completed",
            runner=settings.runner,
            roots=[display(r) for r in roots],
            added=sum(1 for f, _ in plan.new if f.path not in not_loaded),
            updated=sum(1 for f, _ in plan.changed if f.path not in not_loaded),
            moved=len(plan.moved),
            deleted=len(plan.removed) + len(empty_existing),
            skipped=len(plan.unchanged) + len(empty_paths),
            unsupported=len(unsupported),
            unsupported_files=found.unsupported_files(),
            failed=len(errors),
            chunks=totals.chunks,
            embedded_chunks=totals.embed.embedded,
            reused_vectors=totals.embed.reused,
            model_calls=totals.embed.calls,
            truncated=totals.embed.truncated,
            **_llm_counts(totals.llm),
            ocr_pages=totals.ocr_pages,
            ocr_seconds=round(totals.ocr_seconds, 3),
            permissions_updated=permissions.changed,
            # Display form: a name that is not UTF-8 shows as \xNN (quarry/core/paths.py).
            errors=[{"path": display(e.path), "error": e.error} for e in errors],
            durations=clock.as_dict(),
            settings=settings.public_dict(),
        )
        meta = {
            "content_fingerprint": content_fingerprint(settings),
            "format_versions": recorded_versions(),
            "sectioner": settings.sectioner,
            "context": settings.context,
            "embed_backend": settings.embed_backend,
        }
        if writer is not None:
            _info, report = commit_run(run_id, unwalked(report), meta)
        else:
            # Nothing to write (unchanged files, touched ones included: their new mtimes are
            # recorded by the next run that commits; failures are listed in the row).
            t = time.perf_counter()
            remove_debris(store)  # what a killed run left, as a writer would on opening
            report = report.finished_with(commit_seconds=time.perf_counter() - t)
            journal.record_run(opened, report)
        _audit_run(opened, report, verdict, acl_before)
        out = {
            **report.to_dict(),
            "dry_run": False,
            "plan": plan.counts(),
            "rebuild": rebuild_reason,
            "reparsed_formats": planned.reparsed,
        }
        _artifact(out)
        logger.info(
            "run %s: %s; embedded %d chunks in %d model calls, reused %d stored vectors",
            run_id,
            {k: out[k] for k in ("added", "updated", "moved", "deleted", "skipped", "unsupported", "failed")},
            report.embedded_chunks,
            report.model_calls,
            report.reused_vectors,
        )
        if settings.uses_llm:
            logger.info(
                "LLM: %d calls, %d cached answers, %d prompt + %d completion tokens, %d fallbacks",
                report.llm_calls,
                report.llm_cached,
                report.llm_prompt_tokens,
                report.llm_completion_tokens,
                len(report.llm_fallback_windows),
            )
        return out
    finally:
        if writer is not None:
            detach_writer(run_id)
            writer.close()


def _write_metrics(store, started: datetime) -> None:
    """``$QUARRY_METRICS_FILE``: the run metrics after this run, for node_exporter's textfile collector."""
    path = environment().metrics_file
    if not path:
        return
    try:
        since = started.replace(tzinfo=UTC).timestamp()
        write_textfile(path, run_facts(store, bytes_written=written_since(store, since)))
    except Exception as exc:  # noqa: BLE001 - the run stands; its metrics file says nothing new
        get_run_logger().warning("could not write the metrics file %s: %s", path, exc)


def _audit_run(opened, report: RunReport, verdict, acl_before: dict | None) -> None:
    """The audit log's entries for a finished run: the guard overridden, documents deleted,
    permissions changed (documents and principals counted before and after)."""
    facts = {"run_id": report.run_id, "roots": report.roots}
    if verdict.overridden:
        audit.record(opened, "guard.override", {**facts, "deleted": report.deleted, "would_refuse": verdict.overridden})
    if report.deleted:
        audit.record(opened, "run.documents_deleted", {**facts, "deleted": report.deleted})
    if acl_before is not None and report.permissions_updated:
        audit.record(
            opened,
            "run.permissions_changed",
            {
                **facts,
                "documents_changed": report.permissions_updated,
                "before": acl_before,
                "after": acl_counts(opened.folder),
            },
        )


def _llm_counts(llm: dict) -> dict:
    """The run's LLM counters: the sum of its batches' (zeros when no LLM was used)."""
    out = {k: llm.get(k, 0) for k in LLM_COUNTERS}
    out["llm_fallback_windows"] = [{**f, "path": display(f["path"])} for f in llm.get("llm_fallback_windows", [])]
    return out


def _artifact(report: dict) -> None:
    rows = "\n".join(f"| {k} | {report[k]} |" for k in RunReport.counters())
    errors = "\n".join(f"- `{e['path']}`: {e['error']}" for e in report["errors"][:200]) or "none"
    unsupported = (
        "\n".join(f"- `{u['path']}`: {u['reason']}" for u in report.get("unsupported_files", [])[:200]) or "none"
    )
    fallbacks = (
        "\n".join(
            f"- `{f['path']}` {f['kind']}"
            + (f" window {f['window']}" if f["window"] is not None else "")
            + f": {f['error']}"
            for f in report.get("llm_fallback_windows", [])[:200]
        )
        or "none"
    )
    timing = "\n".join(
        f"| {stage} | {d['seconds']:.2f} | {d['rows'] if d['rows'] is not None else ''} | {d['rows_per_s'] or ''} |"
        for stage, d in report["durations"].items()
    )
    message = f"**{report['status']}**: {report['message']}\n\n" if report.get("message") else ""
    create_markdown_artifact(
        key="quarry-index-run",
        markdown=f"# quarry index run {report['run_id']} ({report['runner']} runner)\n\n{message}| count | value |\n"
        f"|---|---|\n{rows}\n\n## Stages\n\n| stage | seconds | rows | rows/s |\n|---|---|---|---|\n{timing}\n\n"
        f"## Failed files\n{errors}\n\n## Unsupported files\n{unsupported}\n\n"
        f"## LLM fallbacks to local rules\n{fallbacks}\n",
        description=f"quarry index run {report['run_id']}",
    )
