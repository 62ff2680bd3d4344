"""``quarry ask``: flags in, :meth:`quarry.Index.answer` out, the answer and its sources printed.

Registered on the ``quarry`` group by :func:`register` (one line in ``main.py``), with main's shared
options, like :mod:`quarry.cli.serving`.
"""

from __future__ import annotations

import sys

import click

from quarry.cli.options import filter_of, filter_options, options
from quarry.search.parameters import ANSWER


def _pages(item: dict) -> str:
    start, end = item.get("page_start"), item.get("page_end")
    if start is None:
        return ""
    return f", page {start}" if end in (None, start) else f", pages {start}-{end}"


def print_answer(data: dict, show_evidence: bool = False) -> None:
    """The text form: the answer with [n] markers, then the numbered sources with path and pages."""
    status = data["status"]
    if status == "not_found":
        searched = data.get("searched") or {}
        terms = ", ".join(searched.get("terms") or []) or "nothing"
        click.echo(
            f"Not found in the index: {searched.get('reason', 'no passage answers the question')} "
            f"(searched for: {terms})."
        )
    elif status == "error":
        click.echo(f"error: {data.get('error') or 'no answer'}", err=True)
    else:
        if status == "refused":
            click.echo("The model declined to answer:")
        click.echo(data["text"])
    if data.get("citations"):
        click.echo("\nSources:")
        for c in data["citations"]:
            click.echo(f"  [{c['number']}] {c['path']}{_pages(c)}  (chunk {c['chunk_id']})")
    for sentence in data.get("uncited") or []:
        click.echo(f"warning: no citation for: {sentence}", err=True)
    for warning in data.get("warnings") or []:
        click.echo(f"warning: {warning}", err=True)
    if show_evidence and data.get("evidence"):
        click.echo("\nEvidence given to the model:")
        for p in data["evidence"]:
            click.echo(
                f"\n--- passage {p['number']}: {p['path']}{_pages(p)} (chunks {p['first_chunk']}-{p['last_chunk']})"
            )
            click.echo(p["text"])
    usage, timings = data.get("usage") or {}, data.get("timings") or {}
    if usage.get("calls"):
        click.echo(
            f"\n{data['model']}: {usage.get('prompt_tokens', 0)} tokens in, {usage.get('completion_tokens', 0)} "
            f"out; retrieve {timings.get('retrieve', 0):.0f} ms, generate {timings.get('generate', 0):.0f} ms",
            err=True,
        )


def register(group: click.Group, *, db_option, json_option, handle_errors) -> None:
    """Add ``ask`` to the ``quarry`` group."""

    @group.command()
    @click.argument("question")
    @db_option
    @options(ANSWER, "k", "mode")
    @filter_options
    @click.option("--model", default=None, help="Chat model ($QUARRY_ANSWER_MODEL, else $QUARRY_LLM_MODEL).")
    @click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint ($QUARRY_LLM_BASE_URL).")
    @click.option(
        "--llm-api-key",
        default=None,
        help="API key ($QUARRY_LLM_API_KEY, else $OPENAI_API_KEY); never stored or printed.",
    )
    @options(ANSWER, "max_context_tokens", "style")
    @click.option("--show-evidence", is_flag=True, help="Also print the passages the model was given.")
    @click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default=None,
        help="Output format (default text; --json is --format json).",
    )
    @json_option
    @handle_errors
    def ask(question, db, as_principals, model, llm_base_url, llm_api_key, show_evidence, fmt, as_json, **args):
        """Answer QUESTION from the indexed documents, with checked citations.

        Needs an OpenAI-compatible chat endpoint (docs/answers.md). Only documents the --as
        principals may read are searched; a question the index cannot answer is `not found`
        without a model call. Exit 1 when the endpoint gave no answer.
        """
        import quarry
        from quarry.core.errors import UsageError
        from quarry.core.settings import Settings
        from quarry.search.serialize import dumps

        if as_json and fmt not in (None, "json"):
            raise UsageError(f"--json and --format {fmt} disagree; give one of them")
        fmt = "json" if as_json else (fmt or "text")
        settings = Settings.from_env(llm_base_url=llm_base_url, llm_api_key=llm_api_key)
        with quarry.open(db, settings) as idx:
            got = idx.answer(
                question,
                filters=filter_of(args),
                principals=list(as_principals) if as_principals else None,
                model=model,
                **args,
            )
        data = got.to_dict()
        if fmt == "json":
            click.echo(dumps(data, indent=2))
        else:
            print_answer(data, show_evidence)
        if got.status == "error":
            if fmt == "json":
                click.echo(f"error: {got.error}", err=True)
            sys.exit(1)
