"""The ``quarry`` command: a thin Click layer over quarry's library.

Exit codes: 0 ok; 2 usage error; 3 the run finished but some files failed; 1 anything else.
Errors print as one line; set ``QUARRY_DEBUG=1`` for the traceback.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
from pathlib import Path

import click

from quarry.cli import output, reports
from quarry.cli.options import RegistryChoice, filter_of, filter_options, options, pairs
from quarry.cli.output import FORMATS as OUTPUT_FORMATS
from quarry.core.environment import environment as _environment
from quarry.core.errors import QuarryError
from quarry.core.settings import RUNNERS, default_db
from quarry.search.parameters import SEARCH

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
    help=f"Store directory, or s3://bucket/prefix (AWS_* environment), gs://bucket/prefix "
    f"(GOOGLE_APPLICATION_CREDENTIALS) or az://container/prefix (AZURE_STORAGE_*). "
    f"Default: $QUARRY_DB or {default_db()}.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


LOG_LEVELS = ("debug", "info", "warning", "error")


def eval_options(fn):
    """--eval/--eval-margin of index and serve: score question sets after each run, flag drops."""
    fn = click.option(
        "--eval-margin",
        type=click.FloatRange(0, 1),
        default=0.05,
        show_default=True,
        help="With --eval: fail the run (exit 5) when a metric falls more than this below the previous generation's.",
    )(fn)
    return click.option(
        "--eval",
        "eval_sets",
        multiple=True,
        metavar="SET",
        help="After the run, score this question set of the store (`quarry eval generate`) on the new "
        "generation (repeatable; results in the evals table).",
    )(fn)


def evaluate_option(eval_sets, margin) -> dict | None:
    return {"sets": list(eval_sets), "margin": margin} if eval_sets else None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="quarry")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS),
    default=None,
    help="Log level of quarry and Prefect (default warning; $QUARRY_LOG_LEVEL).",
)
@click.option("-v", "--verbose", count=True, help="More log output: -v is --log-level info, -vv debug.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="text, or json: one object a line with time, level, run id, stage, path, message and trace id "
    "($QUARRY_LOG_FORMAT; for index, serve and api).",
)
def cli(log_level, verbose, log_format):
    """quarry: index document trees into LanceDB + DuckDB and search them (hybrid BM25 + vectors).

    Shell completion: eval "$(_QUARRY_COMPLETE=bash_source quarry)" (zsh_source, fish_source).
    """
    level = log_level or {0: None, 1: "info"}.get(verbose, "debug") or _environment().log_level
    if (log_format or _environment().log_format) == "json":
        if level and level.lower() not in LOG_LEVELS:
            raise click.UsageError(f"unknown log level {level!r}; choose one of {', '.join(LOG_LEVELS)}")
        from quarry.core.logs import configure

        configure(level or "info", "json")
    elif level:
        configure_logging(level)


def configure_logging(level: str) -> None:
    """Send quarry's and Prefect's log records at ``level`` and above to stderr."""
    import logging

    name = level.upper()
    if name.lower() not in LOG_LEVELS:
        raise click.UsageError(f"unknown log level {level!r}; choose one of {', '.join(LOG_LEVELS)}")
    # Prefect reads its level when first imported, which the commands do lazily, after this
    os.environ["PREFECT_LOGGING_LEVEL"] = name
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("quarry").setLevel(name)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@click.option("--full", is_flag=True, help="Re-process every file (vectors are still reused where text is equal).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be added, updated, moved and deleted, and what the deletion guard would stop; "
    "change nothing.",
)
@click.option(
    "--allow-deletes",
    is_flag=True,
    help="Let this run delete more than the deletion guard allows: more than half of a root's documents, "
    "all documents of an emptied or removed root, or everything a pattern no longer matches "
    "($QUARRY_ALLOW_DELETES).",
)
@click.option("--include", multiple=True, help="Only files matching this glob (repeatable).")
@click.option("--exclude", multiple=True, help="Skip files matching this glob (repeatable).")
@click.option("--chunk-size", type=int, default=None, help="Chunk size in characters (default 800).")
@click.option("--chunk-overlap", type=int, default=None, help="Characters of overlap between chunks (default 0).")
@click.option(
    "--embed-backend",
    type=RegistryChoice("quarry.ingest.embedders.base:EMBEDDERS"),
    default=None,
    help="onnx-int8 (default), onnx, torch (needs quarry[torch]), openai, or hash (tests only) "
    "($QUARRY_EMBED_BACKEND).",
)
@click.option("--embed-model", default=None, help="Embedding model name ($QUARRY_EMBED_MODEL).")
@click.option(
    "--sectioner",
    type=RegistryChoice("quarry.ingest.sectioning:SECTIONERS"),
    default=None,
    help="structure (headings; default), semantic (embedding topic shifts in long spans) or llm ($QUARRY_SECTIONER).",
)
@click.option(
    "--context",
    "context_writer",
    type=RegistryChoice("quarry.ingest.context:CONTEXT_WRITERS"),
    default=None,
    help="Chunk headers from rules (default) or an LLM's title and summary ($QUARRY_CONTEXT).",
)
@click.option(
    "--header-fields",
    default=None,
    help="Header lines, comma-separated: title, summary, section, section_summary, chunk_context, "
    "page, table, or none ($QUARRY_HEADER_FIELDS).",
)
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint for llm modes ($QUARRY_LLM_BASE_URL).")
@click.option("--llm-model", default=None, help="Chat model for llm modes ($QUARRY_LLM_MODEL).")
@click.option(
    "--llm-api-key",
    default=None,
    help="API key for llm modes ($QUARRY_LLM_API_KEY, else $OPENAI_API_KEY); never stored or printed.",
)
@click.option(
    "--llm-concurrency",
    type=click.IntRange(1, 256),
    default=None,
    help="LLM requests in flight at once (default 8; $QUARRY_LLM_CONCURRENCY).",
)
@click.option(
    "--llm-rate-limit",
    type=click.IntRange(0, 1_000_000),
    default=None,
    help="LLM requests per minute, 0 = unlimited ($QUARRY_LLM_RATE_LIMIT).",
)
@click.option(
    "--llm-section-summaries/--no-llm-section-summaries",
    default=None,
    help="With --context llm: one summary per section in the header (a call per section).",
)
@click.option(
    "--llm-chunk-context/--no-llm-chunk-context",
    default=None,
    help="Contextual retrieval: an LLM-written context line per chunk (a call per chunk; off by default).",
)
@click.option(
    "--if-busy",
    type=click.Choice(["fail", "skip"]),
    default="fail",
    show_default=True,
    help="When another run holds the store: fail (exit 1), or skip — exit 0 and record a skipped run "
    "(for cron jobs; what `quarry serve` does).",
)
@click.option(
    "--ocr/--no-ocr",
    default=None,
    help="OCR images and PDF pages without a text layer (default on; $QUARRY_OCR=0 turns it off).",
)
@click.option(
    "--runner",
    type=click.Choice(RUNNERS),
    default=None,
    help="Where batches parse and embed: threads of this process (default), processes, dask (a local "
    "cluster, or --dask-address) or ray (needs quarry[ray]; $QUARRY_RAY_ADDRESS) ($QUARRY_RUNNER).",
)
@click.option(
    "--workers",
    type=click.IntRange(0, 4096),
    default=None,
    help="Worker processes of the processes/dask/ray runners (default one per CPU); batches per stage "
    "for threads (default 1) ($QUARRY_WORKERS).",
)
@click.option(
    "--dask-address",
    default=None,
    metavar="URL",
    help="Scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786 (implies --runner dask; "
    "$QUARRY_DASK_ADDRESS).",
)
@click.option(
    "--acl-rules",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Document permissions from a YAML list of {path: GLOB, principals: [...]} (globs relative to "
    "the root, first match wins; remembered for later runs; docs/api.md).",
)
@click.option(
    "--acl",
    "acl_source",
    type=click.Choice(["none", "posix", "rules"]),
    default=None,
    help="Where permissions come from: posix (owner, group, mode), none (all public) or rules "
    "(--acl-rules). Default: what each root had, else none.",
)
@eval_options
@json_option
@handle_errors
def index(
    paths,
    db,
    full,
    dry_run,
    include,
    exclude,
    chunk_size,
    chunk_overlap,
    embed_backend,
    embed_model,
    sectioner,
    context_writer,
    header_fields,
    llm_base_url,
    llm_model,
    llm_api_key,
    llm_concurrency,
    llm_rate_limit,
    llm_section_summaries,
    llm_chunk_context,
    if_busy,
    ocr,
    runner,
    workers,
    dask_address,
    allow_deletes,
    acl_rules,
    acl_source,
    eval_sets,
    eval_margin,
    as_json,
):
    """Index files under PATHS into the store (incremental: only what changed is redone).

    A path may be a folder, a file, or a tree on object storage: s3://bucket/prefix,
    gs://bucket/prefix, az://container/prefix (credentials from the cloud's environment; an
    unchanged object is never downloaded).

    A run never deletes by accident: a root that is missing, unreadable or empty keeps its
    documents (and fails, exit 3); a run that would delete more than half of a root's documents,
    or whose patterns match none of its files, stops before writing (exit 4) unless --allow-deletes.
    """
    from quarry.flows.run import index as run_index

    settings = {
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
        "llm_api_key": llm_api_key,
        "llm_concurrency": llm_concurrency,
        "llm_rate_limit": llm_rate_limit,
        "llm_section_summaries": llm_section_summaries,
        "llm_chunk_context": llm_chunk_context,
        "ocr": ocr,
        "runner": runner or ("dask" if dask_address else None),
        "workers": workers,
        "dask_address": dask_address,
        "allow_deletes": allow_deletes or None,
        "acl": acl_source,
        "acl_rules": str(Path(acl_rules).expanduser().absolute()) if acl_rules else None,
    }
    report = run_index(
        list(paths),
        db,
        full=full,
        dry_run=dry_run,
        if_busy=if_busy,
        progress=not as_json,
        evaluate=evaluate_option(eval_sets, eval_margin),
        **{k: v for k, v in settings.items() if v is not None},
    )
    if as_json:
        reports.echo_json(report)
    elif report.get("status") == "skipped":
        click.echo(f"skipped: {report.get('message') or report['errors'][0]['error']}")
    else:
        reports.print_index_report(report)
    if report.get("failed"):
        sys.exit(EXIT_PARTIAL)


@cli.command()
@click.argument("query")
@db_option
@options(SEARCH, "k", "mode", "candidates", "fusion", "rrf_k")
@filter_options
@options(SEARCH, "weights", "min_scores", "explain", "window", "segments", "rerank", "rerank_candidates")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(OUTPUT_FORMATS),
    default=None,
    help="Output format (default table; --json is --format json).",
)
@options(SEARCH, "collapse")
@click.option("--copies", "show_copies", is_flag=True, help="List the paths of each hit's copies (the table format).")
@json_option
@handle_errors
def search(query, db, as_principals, explain, fmt, show_copies, as_json, **args):
    """Search the index for QUERY.

    The options are the fields of POST /v1/search and the parameters of the MCP search tool: the
    same names, limits and defaults (docs/query.md)."""
    import quarry
    from quarry.core.errors import UsageError
    from quarry.search import serialize

    if as_json and fmt not in (None, "json"):
        raise UsageError(f"--json and --format {fmt} disagree; give one of them")
    fmt = "json" if as_json else (fmt or "table")
    filters = filter_of(args)
    weights, min_scores = (pairs(args.pop(name), SEARCH[name]) for name in ("weights", "min_scores"))
    with quarry.open(db) as idx:
        response = idx.search(
            query,
            filters=filters,
            weights=weights,
            min_scores=min_scores,
            principals=list(as_principals) if as_principals else None,
            **args,
        )
    for warning in response.warnings:
        click.echo(f"warning: {warning}", err=True)
    if fmt == "json":
        click.echo(serialize.dumps(serialize.payload(response, explained=explain), indent=2))
    elif fmt == "jsonl":
        for line in serialize.lines(response, explained=explain):
            click.echo(line)
    elif response.windows is not None:
        output.print_blocks(response.windows, "window")
    elif response.segments is not None:
        output.print_blocks(response.segments, "segment")
    else:
        output.print_results(response, explained=explain, copies=show_copies)
    if fmt == "table" and response.weak and response.results:
        click.echo(output.WEAK_LINE)


@cli.command(name="export")
@click.argument("out", type=click.Path())
@db_option
# export.FORMATS, listed here (tests/test_registry.py checks): importing that module would load pyarrow
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "jsonl"]),
    default="parquet",
    show_default=True,
    help="File format of OUT/documents, OUT/sections and OUT/chunks.",
)
@click.option("--vectors", is_flag=True, help="Add each chunk's embedding (column vector) from LanceDB.")
@filter_options
@click.option(
    "--batch-rows",
    type=click.IntRange(1, 10_000_000),
    default=8192,
    show_default=True,
    help="Rows per streamed batch (memory stays bounded by one batch).",
)
@click.option("--overwrite", is_flag=True, help="Write into OUT even if it is not empty (replaces the export files).")
@click.option(
    "--redact",
    default="",
    metavar="KINDS",
    help="Mask personal data and secrets in the text columns: all, or a comma list of email, phone, "
    "card, iban, national_id, secret (docs/corpus.md).",
)
@json_option
@handle_errors
def export_cmd(
    out,
    db,
    fmt,
    vectors,
    as_principals,
    batch_rows,
    overwrite,
    redact,
    as_json,
    **filter_args,
):
    """Write documents, sections and chunks of the committed index to OUT as Parquet or JSONL
    (OUT ending in .parquet or .jsonl: the chunks alone, in that one file)."""
    import quarry

    with quarry.open(db) as idx:
        report = idx.export(
            out,
            fmt,
            vectors=vectors,
            filters=filter_of(filter_args),
            batch_rows=batch_rows,
            overwrite=overwrite,
            principals=list(as_principals) if as_principals else None,
            redact=redact,
        )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    click.echo(
        f"exported generation {report.generation} to {report.out}: "
        + ", ".join(f"{n} {name}" for name, n in report.rows.items())
        + (" (with vectors)" if vectors else "")
        + (f"; filter: {report.filter}" if report.filter else "")
        + (f"; redacted: {', '.join(report.redacted)}" if report.redacted else "")
    )


@cli.command()
@db_option
@json_option
@handle_errors
def status(db, as_json):
    """Documents, sections, chunks, embedding model and the last run."""
    import quarry

    with quarry.open(db) as idx:
        info = idx.status()
    reports.echo_json(info) if as_json else reports.print_status(info)


def _run_item(run: dict) -> dict:
    """A runs-table row or journal line for output: every :class:`RunReport` field, in its order;
    rows from an older quarry read as zero for the counters they lack."""
    from quarry.core.models import RunReport

    return RunReport.from_row(run).to_dict()


@cli.command()
@db_option
@click.option("-n", "--limit", type=click.IntRange(1, 100000), default=20, show_default=True)
@json_option
@handle_errors
def runs(db, limit, as_json):
    """Index runs, newest first, with the time and rows/s of each stage; then the newest evaluation of
    each question set (`quarry eval run`; all of them: `quarry sql "SELECT * FROM evals"`)."""
    import quarry

    with quarry.open(db) as idx:
        items = [_run_item(r) for r in idx.runs(limit)]
        latest = idx.evals(latest=True)
    if as_json:
        reports.echo_json(items)
    else:
        reports.print_runs(items)
        reports.print_evals(latest)


@cli.command()
@json_option
@click.option(
    "--markdown", is_flag=True, help="Print the table of docs/formats.md (what quarry reads, whatever is installed)."
)
@handle_errors
def formats(as_json, markdown):
    """File formats quarry reads, by which library or program, and which of those are missing here."""
    from quarry.ingest.parsers.describe import describe_formats, formats_markdown
    from quarry.ingest.parsers.ocr import engine_name

    if markdown:
        click.echo(formats_markdown())
        return
    rows, engine = describe_formats(), engine_name() or None
    reports.echo_json({"formats": rows, "ocr_engine": engine}) if as_json else reports.print_formats(rows, engine)


@cli.command()
@json_option
@handle_errors
def plugins(as_json):
    """Every extension point's components, which plugin (entry point) added each, and plugins that
    failed to load."""
    from quarry.core.registry import components

    out = components()
    reports.echo_json(out) if as_json else reports.print_plugins(out)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@click.option("--cron", required=True, help='Schedule, e.g. "*/15 * * * *" (every 15 minutes) or "@hourly".')
@click.option(
    "--name",
    default=None,
    help="Deployment name (default quarry-index-<8 hex digits of the store path>, one per store).",
)
@click.option(
    "--initial-run/--no-initial-run",
    default=True,
    show_default=True,
    help="Index once at start, not only at the first tick of --cron.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port of the private Prefect API on 127.0.0.1 (default: a free one; printed at start).",
)
@eval_options
@handle_errors
def serve(paths, db, cron, name, initial_run, port, eval_sets, eval_margin):
    """Re-index PATHS (folders, files, s3:// gs:// az:// URLs) on a cron schedule until SIGTERM or Ctrl-C; the
    first run starts at once.

    Without $PREFECT_API_URL, quarry runs a private Prefect server (with its scheduler) tied to
    this process, on 127.0.0.1, its history in the store (<store>/prefect/prefect.db); `quarry
    index` runs of the same store record their history there too while it serves. A run that
    finds the store busy is skipped, and one the deletion guard stops is failed; both are in
    `quarry runs`. With --eval, each run is followed by the evaluation of the question sets named, and
    fails when a metric falls more than --eval-margin below the previous generation's.
    """
    from quarry.flows.run import serve as run_serve

    def started(deployment: str, url: str) -> None:
        click.echo(
            f"serving quarry-index/{deployment}: indexing {', '.join(map(str, paths))} on '{cron}'"
            f"{', first run now' if initial_run else ''} (Ctrl-C or SIGTERM stops)"
        )
        click.echo(f"Prefect API: {url}")

    run_serve(
        list(paths),
        db,
        cron=cron,
        name=name,
        port=port,
        initial_run=initial_run,
        on_start=started,
        evaluate=evaluate_option(eval_sets, eval_margin),
    )
    click.echo("stopped")


@cli.command()
@db_option
@click.option(
    "--to",
    "to",
    type=click.IntRange(min=1),
    default=None,
    metavar="GENERATION",
    help="The generation to make current again (default: the one before the current one).",
)
@click.option("--list", "list_only", is_flag=True, help="List the generations a rollback can go to; change nothing.")
@json_option
@handle_errors
def rollback(db, to, list_only, as_json):
    """Make an earlier committed generation current again, atomically (a new generation).

    The store keeps the last $QUARRY_KEEP_GENERATIONS generations (default 2: the current one and
    the one before it); `quarry maintain --keep-generations N` prunes to N. Refused while an index
    run holds the store.
    """
    from quarry.store.handle import open_store
    from quarry.store.rollback import list_generations
    from quarry.store.rollback import rollback as run_rollback

    store = open_store(db)
    if list_only:
        items = list_generations(store)
        if as_json:
            reports.echo_json(items)
        else:
            reports.print_generations(items)
        return
    report = run_rollback(store, to)
    if as_json:
        reports.echo_json(report)
    else:
        click.echo(f"{report['message']}; `quarry rollback --to {report['from_generation']}` undoes it")


@cli.group()
def corpus():
    """Corpus preparation: what the store holds before it is exported as a corpus (docs/corpus.md)."""


@corpus.command(name="report")
@db_option
@json_option
@handle_errors
def corpus_report(db, as_json):
    """Duplicates by folder and bytes saved, languages, PII by kind, boilerplate per root."""
    import quarry

    with quarry.open(db) as idx:
        report = idx.corpus_report()
    reports.echo_json(report) if as_json else reports.print_corpus_report(report)


@cli.command()
@click.argument("query")
@db_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "jsonl", "csv"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Fetch at most this many rows.")
@handle_errors
def sql(query, db, fmt, limit):
    """Run read-only SQL on the current catalog: tables documents, sections, chunks, runs, meta;
    views chunks_full and sections_full (docs/export.md).

    Example: quarry sql "SELECT file_type, count(*) FROM documents GROUP BY 1"
    """
    import quarry

    with quarry.open(db) as idx:
        result = idx.sql(query, limit=limit)
    reports.print_sql(result, fmt)


@cli.command()
@db_option
@click.option("--repair", is_flag=True, help="Fix what is safely repairable (takes the writer lock).")
@json_option
@handle_errors
def doctor(db, repair, as_json):
    """Check that CURRENT, the catalog, the vectors and the index files agree; exit 1 if not."""
    from quarry.store.doctor import diagnose
    from quarry.store.handle import open_store

    report = diagnose(open_store(db), repair=repair)
    reports.echo_json(report.to_dict()) if as_json else reports.print_doctor(report, repair)
    if not report.healthy:
        sys.exit(1)


@cli.command()
@db_option
@click.option(
    "--keep-generations",
    type=click.IntRange(min=1),
    default=None,
    help="Generations kept on object storage (default $QUARRY_KEEP_GENERATIONS or 2).",
)
@click.option(
    "--keep-versions-hours",
    type=click.FloatRange(min=0),
    default=None,
    help="LanceDB versions younger than this stay (default $QUARRY_KEEP_VERSIONS_HOURS or 24).",
)
@click.option(
    "--reindex-share",
    type=click.FloatRange(0, 1),
    default=None,
    help="Rebuild a LanceDB index when this share of rows is unindexed (default $QUARRY_REINDEX_SHARE or 0.2).",
)
@click.option(
    "--if-busy",
    type=click.Choice(["fail", "skip"]),
    default="fail",
    show_default=True,
    help="When an index run holds the store: fail (exit 1), or skip (exit 0).",
)
@json_option
@handle_errors
def maintain(db, keep_generations, keep_versions_hours, reindex_share, if_busy, as_json):
    """Compact the vectors, rebuild stale indices, merge catalog layers and index segments, drop old
    generations and versions, check the store."""
    from datetime import timedelta

    from quarry.store.handle import open_store
    from quarry.store.maintain import maintain as run

    keep = timedelta(hours=keep_versions_hours) if keep_versions_hours is not None else None
    report = run(open_store(db), keep_generations, keep, reindex_share, if_busy=if_busy)
    reports.echo_json(report) if as_json else reports.print_maintain(report)
    if report["status"] == "completed" and not report["check"]["healthy"]:
        sys.exit(1)


from quarry.cli.evals import register as _register_evals  # noqa: E402 - after the shared options it takes
from quarry.cli.serving import register as _register_serving  # noqa: E402 - after the shared options it takes

_register_serving(cli, db_option=db_option, json_option=json_option, handle_errors=handle_errors)
_register_evals(
    cli, db_option=db_option, json_option=json_option, handle_errors=handle_errors, echo_json=reports.echo_json
)

from quarry.cli.ask import register as _register_ask  # noqa: E402 - after the shared options it takes

_register_ask(
    cli,
    db_option=db_option,
    json_option=json_option,
    handle_errors=handle_errors,
)

from quarry.cli.operations import register as _register_operations  # noqa: E402 - as above

_register_operations(cli, db_option=db_option, json_option=json_option, handle_errors=handle_errors)


def main() -> None:
    # Offline and quiet by default: no hub look-ups, no download progress bars.
    for key, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(key, value)
    from quarry.cli.pipes import guard_std_streams

    guard_std_streams()
    try:
        try:
            cli.main(prog_name="quarry", standalone_mode=False)
        except click.UsageError as exc:  # Click's own are four lines (usage, hint, blank, error): one, like ours
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            _fail(f"{exc.format_message().rstrip('.')}{hint}", exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort:
            _fail("aborted", 1)
        sys.exit(0)
    finally:
        # The interpreter's last act is a full collection over every object the command imported
        # or made (1-2 s after an index run on a loaded 2-core machine). A command's files are
        # closed and its run committed by then: the collection is skipped.
        gc.freeze()


if __name__ == "__main__":
    main()
