"""The ``quarry`` command: a thin Click layer over quarry's library.

Exit codes: 0 ok; 2 usage error; 3 the run finished but some files failed; 1 anything else.
Errors print as one line; set ``QUARRY_DEBUG=1`` for the traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import click

from quarry.errors import QuarryError
from quarry.settings import default_db

EXIT_PARTIAL = 3


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn):
    """Turn exceptions into one clear line and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except QuarryError as exc:
            if os.environ.get("QUARRY_DEBUG"):
                raise
            _fail(str(exc), exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get("QUARRY_DEBUG"):
                raise
            _fail(f"{type(exc).__name__}: {exc}", 1)

    return wrapper


db_option = click.option(
    "--db",
    type=click.Path(file_okay=False),
    default=None,
    help=f"Store directory. Default: $QUARRY_DB or {default_db()}.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="quarry")
def cli():
    """quarry: index document trees into LanceDB + DuckDB and search them (hybrid BM25 + vectors)."""


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@db_option
@click.option("--full", is_flag=True, help="Re-process every file (vectors are still reused where text is equal).")
@click.option("--dry-run", is_flag=True, help="Print what would be added, updated, moved and deleted; change nothing.")
@click.option("--include", multiple=True, help="Only files matching this glob (repeatable).")
@click.option("--exclude", multiple=True, help="Skip files matching this glob (repeatable).")
@click.option("--chunk-size", type=int, default=None, help="Chunk size in characters (default 800).")
@click.option("--chunk-overlap", type=int, default=None, help="Characters of overlap between chunks (default 0).")
@click.option("--embed-backend", default=None, help="torch, onnx, onnx-int8 or openai ($QUARRY_EMBED_BACKEND).")
@click.option("--embed-model", default=None, help="Embedding model name ($QUARRY_EMBED_MODEL).")
@click.option("--sectioner", type=click.Choice(["structure", "semantic", "llm"]), default=None,
              help="structure (headings; default), semantic (embedding topic shifts in long spans) or llm "
                   "($QUARRY_SECTIONER).")
@click.option("--context", "context_writer", type=click.Choice(["rules", "llm"]), default=None,
              help="Chunk headers from rules (default) or an LLM's title and summary ($QUARRY_CONTEXT).")
@click.option("--header-fields", default=None,
              help="Header lines, comma-separated: title, summary, section, section_summary, chunk_context, or "
                   "none ($QUARRY_HEADER_FIELDS).")
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint for llm modes ($QUARRY_LLM_BASE_URL).")
@click.option("--llm-model", default=None, help="Chat model for llm modes ($QUARRY_LLM_MODEL).")
@click.option("--llm-api-key", default=None,
              help="API key for llm modes ($QUARRY_LLM_API_KEY, else $OPENAI_API_KEY); never stored or printed.")
@click.option("--llm-concurrency", type=click.IntRange(1, 256), default=None,
              help="LLM requests in flight at once (default 8; $QUARRY_LLM_CONCURRENCY).")
@click.option("--llm-rate-limit", type=click.IntRange(0, 1_000_000), default=None,
              help="LLM requests per minute, 0 = unlimited ($QUARRY_LLM_RATE_LIMIT).")
@click.option("--llm-section-summaries/--no-llm-section-summaries", default=None,
              help="With --context llm: one summary per section in the header (a call per section).")
@click.option("--llm-chunk-context/--no-llm-chunk-context", default=None,
              help="Contextual retrieval: an LLM-written context line per chunk (a call per chunk; off by default).")
@json_option
@handle_errors
def index(paths, db, full, dry_run, include, exclude, chunk_size, chunk_overlap, embed_backend, embed_model,
          sectioner, context_writer, header_fields, llm_base_url, llm_model, llm_api_key, llm_concurrency,
          llm_rate_limit, llm_section_summaries, llm_chunk_context, as_json):
    """Index files under PATHS into the store (incremental: only what changed is redone)."""
    from quarry.settings import Settings, store_path
    from quarry.store.layout import WriterLock

    overrides = {
        "include": tuple(include) or None,
        "exclude": tuple(exclude) or None,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
        "embed_backend": embed_backend,
        "embed_model": embed_model,
        "sectioner": sectioner,
        "context": context_writer,
        "header_fields": tuple(f.strip() for f in header_fields.split(",") if f.strip()) if header_fields else None,
        "llm_base_url": llm_base_url,
        "llm_model": llm_model,
        "llm_concurrency": llm_concurrency,
        "llm_rate_limit": llm_rate_limit,
        "llm_section_summaries": llm_section_summaries,
        "llm_chunk_context": llm_chunk_context,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if llm_api_key:
        # Through the environment, never the flow's parameters, which Prefect records.
        os.environ["QUARRY_LLM_API_KEY"] = llm_api_key
    Settings.from_env(**overrides)  # usage errors before any work starts
    store = store_path(db)
    lock = None if dry_run else WriterLock(store).acquire()  # fail fast, before Prefect starts
    try:
        report = run_index_flow([str(p) for p in paths], store, full=full, dry_run=dry_run, overrides=overrides)
    finally:
        if lock:
            lock.release()
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        _print_report(report)
    if report.get("failed"):
        sys.exit(EXIT_PARTIAL)


def run_index_flow(paths: list[str], store: Path, **kwargs) -> dict:
    """Run the Prefect index flow with a private API server unless one is configured."""
    from quarry import progress
    from quarry.orchestration import prefect_api, prefect_environment

    prefect_environment()
    with prefect_api(store / "logs"):
        from flows.index import index_flow

        progress.enable(True)
        return index_flow(paths, db=str(store), **kwargs)


def _print_report(report: dict) -> None:
    if report.get("dry_run"):
        plan = report["plan"]
        click.echo(
            f"dry run: would add {plan['new']}, update {plan['changed']}, move {plan['moved']}, "
            f"delete {plan['removed']}; {plan['unchanged']} unchanged, {report['unsupported']} unsupported"
        )
        for verb, items in report["files"].items():
            for item in items:
                click.echo(f"  {verb}: {' -> '.join(item) if isinstance(item, (list, tuple)) else item}")
        return
    click.echo(
        f"indexed: {report['added']} added, {report['updated']} updated, {report['moved']} moved, "
        f"{report['deleted']} deleted, {report['skipped']} unchanged or empty, "
        f"{report['unsupported']} unsupported, {report['failed']} failed"
    )
    click.echo(
        f"chunks: {report['chunks']} written, {report['embedded_chunks']} embedded in {report['model_calls']} "
        f"model calls, {report['reused_vectors']} vectors reused"
        + (f", {report['truncated']} truncated" if report.get("truncated") else "")
    )
    if report.get("llm_calls") or report.get("llm_cached") or report.get("llm_fallback_windows"):
        click.echo(
            f"llm: {report['llm_calls']} calls, {report['llm_cached']} answers from cache, "
            f"{report['llm_prompt_tokens']} prompt + {report['llm_completion_tokens']} completion tokens"
        )
    for fb in report.get("llm_fallback_windows") or []:
        where = f" window {fb['window']}" if fb.get("window") is not None else ""
        click.echo(f"llm fallback: {fb['path']} {fb['kind']}{where}: {fb['error']}", err=True)
    if report.get("rebuild"):
        click.echo(f"rebuilt: {report['rebuild']}")
    for err in report["errors"]:
        click.echo(f"failed: {err['path']}: {err['error']}", err=True)


@cli.command()
@click.argument("query")
@db_option
@click.option("-k", "k", type=click.IntRange(1, 1000), default=10, show_default=True, help="Results to return.")
@click.option("--mode", type=click.Choice(["hybrid", "vector", "bm25"]), default="hybrid", show_default=True)
@click.option("--candidates", type=click.IntRange(1, 10000), default=None,
              help="Candidates per retriever before fusion (default max(50, 5k)).")
@click.option("--rrf-k", type=click.IntRange(0, 10000), default=60, show_default=True, help="RRF constant k.")
@json_option
@handle_errors
def search(query, db, k, mode, candidates, rrf_k, as_json):
    """Search the index for QUERY."""
    import quarry

    with quarry.open(db) as idx:
        response = idx.search(query, k=k, mode=mode, candidates=candidates, rrf_k=rrf_k)
    if as_json:
        click.echo(json.dumps(response.to_dict(), indent=2, ensure_ascii=False))
        return
    if not response.results:
        click.echo("no results")
    for r in response.results:
        pages = f" p.{r.page_start}" + (f"-{r.page_end}" if r.page_end != r.page_start else "") if r.page_start else ""
        where = f"{r.path}{pages}" + (f" § {r.section}" if r.section else "")
        click.echo(click.style(f"{r.rank:>2}. {r.score:.4f}  {where}", bold=True))
        snippet = " ".join(r.text.split())
        click.echo(f"    {snippet[:300]}{'…' if len(snippet) > 300 else ''}")


@cli.command()
@db_option
@json_option
@handle_errors
def status(db, as_json):
    """Documents, sections, chunks, embedding model and the last run."""
    import quarry

    with quarry.open(db) as idx:
        info = idx.status()
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
        return
    click.echo(f"store:     {info['store']} (generation {info['generation']})")
    click.echo(f"documents: {info['documents']}  sections: {info['sections']}  chunks: {info['chunks']}")
    click.echo(f"model:     {info['model']} ({info['dim']}-d)")
    last = info["last_run"]
    if last:
        click.echo(
            f"last run:  {last['run_id']} {last['status']} at {last['finished']}: {last['added']} added, "
            f"{last['updated']} updated, {last['deleted']} deleted, {last['failed']} failed"
        )


RUN_KEYS = ("run_id", "started", "finished", "status", "added", "updated", "moved", "deleted", "skipped",
            "unsupported", "failed", "chunks", "embedded_chunks", "reused_vectors", "model_calls", "truncated",
            "errors", "durations", "llm_calls", "llm_prompt_tokens", "llm_completion_tokens", "llm_cached",
            "llm_fallback_windows")
LLM_RUN_DEFAULTS = {"llm_calls": 0, "llm_prompt_tokens": 0, "llm_completion_tokens": 0, "llm_cached": 0,
                    "llm_fallback_windows": []}


def _run_item(run: dict) -> dict:
    """A runs-table row for output; rows from before the LLM columns read as zero LLM work."""
    item = {k: run.get(k) for k in RUN_KEYS}
    for key, default in LLM_RUN_DEFAULTS.items():
        if item[key] is None:
            item[key] = default
    if isinstance(item["llm_fallback_windows"], str):
        item["llm_fallback_windows"] = json.loads(item["llm_fallback_windows"])
    return item


@cli.command()
@db_option
@click.option("-n", "--limit", type=click.IntRange(1, 100000), default=20, show_default=True)
@json_option
@handle_errors
def runs(db, limit, as_json):
    """Index runs, newest first."""
    import quarry

    with quarry.open(db) as idx:
        items = [_run_item(r) for r in idx.runs(limit)]
    if as_json:
        click.echo(json.dumps(items, indent=2, default=str))
        return
    for r in items:
        click.echo(
            f"{r['run_id']}  {r['status']:<9} +{r['added']} ~{r['updated']} >{r['moved']} -{r['deleted']} "
            f"={r['skipped']} !{r['failed']}  embedded {r['embedded_chunks']}, reused {r['reused_vectors']}"
            + (f"; llm {r['llm_calls']} calls, {r['llm_cached']} cached, {len(r['llm_fallback_windows'])} fallbacks"
               if r["llm_calls"] or r["llm_cached"] or r["llm_fallback_windows"] else "")
        )


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@db_option
@click.option("--cron", required=True, help='Schedule, e.g. "*/15 * * * *" (every 15 minutes).')
@click.option("--name", default="quarry-index", show_default=True, help="Deployment name.")
@handle_errors
def serve(paths, db, cron, name):
    """Re-index PATHS on a cron schedule (Prefect flow.serve; runs until interrupted)."""
    from quarry.croncheck import validate_cron
    from quarry.orchestration import prefect_api, prefect_environment
    from quarry.settings import store_path

    validate_cron(cron)
    store = store_path(db)
    prefect_environment()
    with prefect_api(store / "logs"):
        from flows.index import index_flow

        click.echo(f"serving {name}: indexing {', '.join(paths)} into {store} on '{cron}' (Ctrl-C stops)")
        index_flow.serve(
            name=name,
            cron=cron,
            parameters={"roots": [str(store_path(p)) for p in paths], "db": str(store)},
            print_starting_message=False,
        )


@cli.command(name="eval")
@click.argument("beir_dir", type=click.Path(exists=True, file_okay=False))
@db_option
@click.option("--mode", "modes", type=click.Choice(["hybrid", "vector", "bm25"]), multiple=True,
              help="Modes to score (repeatable; default all three).")
@click.option("--split", default="test", show_default=True, help="Judgments file qrels/<split>.tsv.")
@click.option("--limit", type=int, default=None, help="Score only the first N queries (quick checks).")
@json_option
@handle_errors
def eval_cmd(beir_dir, db, modes, split, limit, as_json):
    """Index a BEIR-layout folder and report nDCG@10, recall@10/100 and MRR@10 per mode."""
    from quarry.beir_eval import run_beir_eval

    result = run_beir_eval(beir_dir, db=db, modes=modes or ("bm25", "vector", "hybrid"), split=split,
                           limit=limit, index=lambda paths, store: run_index_flow(paths, store))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{result['dataset']} ({result['split']}, {result['queries']} queries)")
    click.echo(f"{'mode':<8} {'nDCG@10':>8} {'R@10':>8} {'R@100':>8} {'MRR@10':>8}")
    for mode, m in result["modes"].items():
        click.echo(f"{mode:<8} {m['ndcg@10']:>8.4f} {m['recall@10']:>8.4f} {m['recall@100']:>8.4f} {m['mrr@10']:>8.4f}")


def main() -> None:
    # Offline and quiet by default: no hub look-ups, no download progress bars.
    for key, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                       ("TRANSFORMERS_VERBOSITY", "error"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(key, value)
    cli()


if __name__ == "__main__":
    main()
