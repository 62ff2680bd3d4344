"""The index flow: discover -> plan -> (process -> embed -> load) per batch -> removals -> commit.

The flow only wires tasks. Everything it writes goes to a new catalog generation and new
LanceDB versions, which become visible at the commit task's pointer rename.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed

from quarry.core import progress
from quarry.ingest.embedders import describe, get_embedder
from quarry.ingest.embedding import EmbedStats
from quarry.core.errors import StoreLocked, UsageError
from quarry.core.paths import display
from quarry.core.settings import Settings, parse_workers, store_path
from quarry.store import journal
from quarry.store.layout import WriterLock, new_run_id, read_pointer
from quarry.store.writer import StoreWriter, remove_debris
from quarry.tasks.discover import discover_files, plan_changes
from quarry.tasks.embed import embed_batch
from quarry.tasks.load import apply_removals_and_moves, commit_run, load_batch
from quarry.tasks.process import process_batch
from quarry.ingest.process import content_fingerprint

FILES_PER_BATCH = 64
BYTES_PER_BATCH = 32 << 20


def _batches(items, files_per_batch: int = FILES_PER_BATCH, bytes_per_batch: int = BYTES_PER_BATCH):
    batch, size = [], 0
    for item in items:
        if batch and (len(batch) >= files_per_batch or size + item[0].size > bytes_per_batch):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item[0].size
    if batch:
        yield batch


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@flow(name="quarry-index", log_prints=False, validate_parameters=False)
def index_flow(
    roots: list[str],
    db: str | None = None,
    full: bool = False,
    dry_run: bool = False,
    overrides: dict | None = None,
    if_busy: str = "fail",
):
    """Index ``roots`` into the store at ``db``; returns the run report (see ``runs`` table).

    ``overrides`` are :class:`~quarry.core.settings.Settings` fields; secrets come only from the
    environment so that they never appear in flow-run parameters. ``if_busy``: what to do when
    another run holds the store — ``fail`` (raise :class:`StoreLocked`) or ``skip`` (record a
    ``skipped`` run and finish; what scheduled runs do, so that a run longer than the interval
    never meets a second writer).
    """
    logger = get_run_logger()
    if if_busy not in ("fail", "skip"):
        raise UsageError(f"if_busy must be 'fail' or 'skip', got {if_busy!r}")
    settings = Settings.from_env(**(overrides or {}))
    store = store_path(db)
    roots = [str(store_path(r)) for r in roots]
    run_id = new_run_id()
    started = _now()
    durations: dict[str, float] = {}
    lock = None
    if not dry_run:
        try:
            lock = WriterLock(store).acquire()  # before any model loads: a busy store costs nothing
        except StoreLocked as exc:
            if if_busy == "fail":
                raise
            row = journal.record_skip(store, run_id, started, [display(r) for r in roots], str(exc),
                                      settings.public_dict())
            logger.info("run %s skipped: %s", run_id, exc)
            return Completed(message=f"skipped: {exc}", name="Skipped", data=row)
    try:
        return _index(logger, settings, store, roots, run_id, started, durations, full, dry_run)
    finally:
        if lock is not None:
            lock.release()


def _index(logger, settings, store, roots, run_id, started, durations, full, dry_run) -> dict:
    model, dim = describe(settings)
    embedder = get_embedder(settings)
    if not dim:
        embedder.embed(["dimension probe"])  # hosted model of unknown size: ask once
        model, dim = embedder.model, embedder.dim

    # The writer (a copy of the whole catalog) is opened only once there is something to write:
    # a run with nothing to do records its row in the run journal and copies nothing.
    writer = None
    committed = read_pointer(store) is not None

    def open_writer() -> StoreWriter:
        nonlocal writer
        if writer is None:
            writer = StoreWriter(store, model, dim, duckdb_fts=settings.duckdb_fts).open()
        return writer

    llm = None
    try:
        t = time.perf_counter()
        files, unsupported, unreadable = discover_files(roots, settings.include, settings.exclude)
        plan, rebuild_reason = plan_changes(store, files, roots, full, content_fingerprint(settings), model, dim,
                                            frozenset(e.path for e in unreadable))
        durations["discover_plan"] = time.perf_counter() - t
        report = {"run_id": run_id, "dry_run": dry_run, "plan": plan.counts(), "rebuild": rebuild_reason,
                  "unsupported": len(unsupported)}
        if dry_run:
            report["files"] = {
                "add": [display(f.path) for f, _ in plan.new],
                "update": [display(f.path) for f, _ in plan.changed],
                "move": [(display(old), display(f.path)) for f, _, old in plan.moved],
                "delete": [display(d.path) for d in plan.removed],
            }
            return report

        errors, empty_existing, empty_paths, chunks = list(unreadable), [], set(), 0
        ocr_pages, ocr_seconds = 0, 0.0
        stats = EmbedStats()
        t_process = t_embed = t_load = 0.0
        todo = plan.to_process
        existing = {doc_id for _, doc_id in plan.changed}
        if settings.uses_llm and todo:
            from quarry.ingest.llm import LLMRuntime

            llm = LLMRuntime(settings, store)  # its answer cache lives in the store: re-runs are free
        bar = progress.start("indexing", total=len(todo))
        workers = parse_workers(settings)
        for batch in _batches(todo):
            t = time.perf_counter()
            records, batch_errors, empty = process_batch(batch, settings, embedder, workers, llm)
            t_process += time.perf_counter() - t
            ocr_pages += sum(r.ocr_pages for r in records)
            ocr_seconds += sum(r.ocr_seconds for r in records)
            errors += batch_errors
            empty_paths.update(f.path for f in empty)
            empty_existing += [doc_id for f, doc_id in batch if f.path in empty_paths and doc_id in existing]
            if records:
                t = time.perf_counter()
                vectors, batch_stats = embed_batch(records, open_writer(), embedder, settings.embed_budget)
                t_embed += time.perf_counter() - t
                for field in ("embedded", "reused", "calls", "truncated"):
                    setattr(stats, field, getattr(stats, field) + getattr(batch_stats, field))
                t = time.perf_counter()
                chunks += load_batch(writer, records, vectors, run_id)
                t_load += time.perf_counter() - t
            bar.advance(len(batch), chunks=chunks)
        bar.stop()
        durations.update(process=t_process, embed=t_embed, load=t_load)

        t = time.perf_counter()
        if writer is None and (not committed or rebuild_reason or plan.removed or plan.moved or empty_existing):
            open_writer()
        if writer is not None:
            apply_removals_and_moves(writer, plan, empty_existing, run_id)
        not_loaded = {e.path for e in errors} | empty_paths
        counts = {
            "added": sum(1 for f, _ in plan.new if f.path not in not_loaded),
            "updated": sum(1 for f, _ in plan.changed if f.path not in not_loaded),
            "moved": len(plan.moved),
            "deleted": len(plan.removed) + len(empty_existing),
            "skipped": len(plan.unchanged) + len(empty_paths),
            "unsupported": len(unsupported),
            "failed": len(errors),
        }
        run_row = {
            "run_id": run_id,
            "started": started,
            "finished": _now(),
            "status": "partial" if errors else "completed",
            "roots": [display(r) for r in roots],
            **counts,
            "chunks": chunks,
            "embedded_chunks": stats.embedded,
            "reused_vectors": stats.reused,
            "model_calls": stats.calls,
            "truncated": stats.truncated,
            **_llm_counts(llm),
            "ocr_pages": ocr_pages,
            "ocr_seconds": round(ocr_seconds, 3),
            # Display form: a name that is not UTF-8 shows as \xNN (quarry/core/paths.py).
            "errors": [{"path": display(e.path), "error": e.error} for e in errors],
            "durations": durations,
            "settings": settings.public_dict(),
        }
        meta = {"content_fingerprint": content_fingerprint(settings), "sectioner": settings.sectioner,
                "context": settings.context, "embed_backend": settings.embed_backend}
        if writer is not None:
            commit_run(writer, run_row, meta)
        else:
            # Nothing to write (unchanged files, touched ones included: their new mtimes are
            # recorded by the next run that commits; failures are listed in the row).
            remove_debris(store)  # what a killed run left, as a writer would on opening
            journal.record_run(store, run_row)
        durations["commit"] = time.perf_counter() - t
        report.update(run_row, started=started.isoformat() + "Z", finished=run_row["finished"].isoformat() + "Z")
        _artifact(report)
        logger.info("run %s: %s", run_id, {k: report[k] for k in counts})
        if llm is not None:
            logger.info("LLM: %d calls, %d cached answers, %d prompt + %d completion tokens, %d fallbacks",
                        report["llm_calls"], report["llm_cached"], report["llm_prompt_tokens"],
                        report["llm_completion_tokens"], len(report["llm_fallback_windows"]))
        return report
    finally:
        if llm is not None:
            llm.close()
        if writer is not None:
            writer.close()


def _llm_counts(llm) -> dict:
    """The run row's LLM columns (zeros when no LLM was used)."""
    if llm is None:
        return {"llm_calls": 0, "llm_prompt_tokens": 0, "llm_completion_tokens": 0, "llm_cached": 0,
                "llm_fallback_windows": []}
    report = llm.report()
    out = {k: report[k] for k in ("llm_calls", "llm_prompt_tokens", "llm_completion_tokens", "llm_cached",
                                  "llm_fallback_windows")}
    out["llm_fallback_windows"] = [{**f, "path": display(f["path"])} for f in out["llm_fallback_windows"]]
    return out


def _artifact(report: dict) -> None:
    rows = "\n".join(
        f"| {k} | {report[k]} |"
        for k in ("added", "updated", "moved", "deleted", "skipped", "unsupported", "failed", "chunks",
                  "embedded_chunks", "reused_vectors", "model_calls", "truncated", "llm_calls", "llm_cached",
                  "llm_prompt_tokens", "llm_completion_tokens", "ocr_pages", "ocr_seconds")
    )
    errors = "\n".join(f"- `{e['path']}`: {e['error']}" for e in report["errors"][:200]) or "none"
    fallbacks = "\n".join(
        f"- `{f['path']}` {f['kind']}" + (f" window {f['window']}" if f["window"] is not None else "")
        + f": {f['error']}" for f in report.get("llm_fallback_windows", [])[:200]) or "none"
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in report["durations"].items())
    create_markdown_artifact(
        key="quarry-index-run",
        markdown=f"# quarry index run {report['run_id']}\n\n| count | value |\n|---|---|\n{rows}\n\n"
        f"**Stages:** {timing}\n\n## Failed files\n{errors}\n\n## LLM fallbacks to local rules\n{fallbacks}\n",
        description=f"quarry index run {report['run_id']}",
    )
