"""What an index run says about itself: its ``runs`` row (:class:`~quarry.core.models.RunReport`),
the catalog meta its commit records, its audit entries, its Prefect artifact and the metrics file.

Plain functions of what the run's tasks returned: the flow (flows/index.py) calls them and wires
tasks; nothing here runs a stage.
"""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from quarry.flows.pipeline import Totals

from quarry.core.environment import environment
from quarry.core.metrics import write_textfile
from quarry.core.models import LLM_COUNTERS, RunReport, StageClock
from quarry.core.paths import display
from quarry.core.settings import Settings
from quarry.ingest.plan import Discovery, RunPlan
from quarry.ingest.process import content_fingerprint, recorded_versions
from quarry.store import audit
from quarry.store.acl import counts as acl_counts
from quarry.store.metrics import run_facts, written_since

__all__ = ["refused", "finished", "commit_meta", "audit_run", "artifact", "write_metrics", "log_summary"]


def _base(run_id: str, started: datetime, settings: Settings, roots: list[str], found: Discovery, clock: StageClock):
    return {
        "run_id": run_id,
        "started": started,
        "runner": settings.runner,
        "roots": [display(r) for r in roots],
        "unsupported": len(found.unsupported),
        "unsupported_files": found.unsupported_files(),
        "durations": clock.as_dict(),
        "settings": settings.public_dict(),
    }


def refused(
    run_id: str, started: datetime, settings: Settings, roots: list[str], found: Discovery, planned: RunPlan, clock
) -> RunReport:
    """The row of a run the deletion guard stopped: nothing written, the guard's reasons as errors."""
    verdict = planned.verdict
    return RunReport(
        **_base(run_id, started, settings, roots, found, clock),
        status="refused",
        errors=[{"path": None, "error": r} for r in verdict.refusals],
        message=verdict.message(),
    )


def finished(
    run_id: str,
    started: datetime,
    settings: Settings,
    roots: list[str],
    found: Discovery,
    planned: RunPlan,
    totals: Totals,
    empty_existing: list[str],
    permissions_changed: int,
    clock: StageClock,
) -> RunReport:
    """The row of a run that got past the guard: what was added, updated, moved, deleted, skipped
    and failed. A file that failed or turned out empty counts as neither added nor updated."""
    plan, verdict = planned.plan, planned.verdict
    errors = verdict.failures + found.unreadable + totals.errors
    empty_paths = {f.path for f in totals.empty}
    not_loaded = {e.path for e in errors} | empty_paths
    return RunReport(
        **_base(run_id, started, settings, roots, found, clock),
        status="partial" if errors else "completed",
        added=sum(1 for f, _ in plan.new if f.path not in not_loaded),
        updated=sum(1 for f, _ in plan.changed if f.path not in not_loaded),
        moved=len(plan.moved),
        deleted=len(plan.removed) + len(empty_existing),
        skipped=len(plan.unchanged) + len(empty_paths),
        failed=len(errors),
        chunks=totals.chunks,
        embedded_chunks=totals.embed.embedded,
        reused_vectors=totals.embed.reused,
        model_calls=totals.embed.calls,
        truncated=totals.embed.truncated,
        **_llm_counts(totals.llm),
        ocr_pages=totals.ocr_pages,
        ocr_seconds=round(totals.ocr_seconds, 3),
        permissions_updated=permissions_changed,
        # Display form: a name that is not UTF-8 shows as \xNN (quarry/core/paths.py).
        errors=[{"path": display(e.path), "error": e.error} for e in errors],
    )


def commit_meta(settings: Settings) -> dict:
    """What a commit records in the catalog's meta about how its contents were cut."""
    return {
        "content_fingerprint": content_fingerprint(settings),
        "format_versions": recorded_versions(),
        "sectioner": settings.sectioner,
        "context": settings.context,
        "embed_backend": settings.embed_backend,
    }


def _llm_counts(llm: dict) -> dict:
    """The run's LLM counters: the sum of its batches' (zeros when no LLM was used)."""
    out = {k: llm.get(k, 0) for k in LLM_COUNTERS}
    out["llm_fallback_windows"] = [{**f, "path": display(f["path"])} for f in llm.get("llm_fallback_windows", [])]
    return out


def audit_run(opened, report: RunReport, verdict, acl_before: dict | None) -> None:
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


def log_summary(logger, report: RunReport, out: dict, uses_llm: bool) -> None:
    """The run's closing log lines: its counts, and the LLM's when it called one."""
    logger.info(
        "run %s: %s; embedded %d chunks in %d model calls, reused %d stored vectors",
        report.run_id,
        {k: out[k] for k in ("added", "updated", "moved", "deleted", "skipped", "unsupported", "failed")},
        report.embedded_chunks,
        report.model_calls,
        report.reused_vectors,
    )
    if uses_llm:
        logger.info(
            "LLM: %d calls, %d cached answers, %d prompt + %d completion tokens, %d fallbacks",
            report.llm_calls,
            report.llm_cached,
            report.llm_prompt_tokens,
            report.llm_completion_tokens,
            len(report.llm_fallback_windows),
        )


def write_metrics(store, started: datetime) -> None:
    """``$QUARRY_METRICS_FILE``: the run metrics after this run, for node_exporter's textfile collector."""
    path = environment().metrics_file
    if not path:
        return
    try:
        since = started.replace(tzinfo=UTC).timestamp()
        write_textfile(path, run_facts(store, bytes_written=written_since(store, since)))
    except Exception as exc:  # noqa: BLE001 - the run stands; its metrics file says nothing new
        get_run_logger().warning("could not write the metrics file %s: %s", path, exc)


def artifact(report: dict) -> None:
    """The run's Prefect artifact: its counts, stages, failed and unsupported files, LLM fallbacks."""
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
