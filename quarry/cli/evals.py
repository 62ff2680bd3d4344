"""``quarry eval``: question sets from the store's own corpus, their scores, and BEIR folders.

``quarry eval BEIR_DIR`` (a folder, not a subcommand name) keeps working: the group hands any first
argument that is not one of its commands to ``eval beir``.
"""

from __future__ import annotations

import click

from quarry.core.models import SEARCH_MODES

EVAL_METHODS = ("known-item", "known-item-popular", "headings", "llm")  # quarry.eval.questions.METHODS


class EvalGroup(click.Group):
    """A group whose unknown first argument is a BEIR folder for its ``beir`` command."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return "beir", self.commands["beir"], args
        return super().resolve_command(ctx, args)


def register(group: click.Group, *, db_option, json_option, handle_errors, echo_json) -> None:
    """Add ``eval`` (generate, run, sets, export, beir) to the ``quarry`` group."""

    @group.group(name="eval", cls=EvalGroup, invoke_without_command=False)
    def eval_group():
        """Measure retrieval quality: `quarry eval generate` draws questions from the store's corpus,
        `quarry eval run SET` scores them; `quarry eval BEIR_DIR` indexes and scores a BEIR folder.
        Results go to the evals table (`quarry sql "SELECT * FROM evals"`). Exit 5: below --fail-under."""

    @eval_group.command()
    @db_option
    @click.option("-n", "n", type=click.IntRange(1, 100_000), default=200, show_default=True, help="Questions to draw.")
    @click.option(
        "--method",
        type=click.Choice(EVAL_METHODS),
        default="known-item",
        show_default=True,
        help="known-item: simulated queries from a document's discriminative terms (-popular: its "
        "frequent terms); headings: section titles; llm: a question per chunk from the chat endpoint.",
    )
    @click.option("--seed", type=int, default=0, show_default=True, help="Same store, method and seed: same questions.")
    @click.option("--name", default=None, help="Name of the set in the store (default: METHOD-SEED).")
    @click.option(
        "--as",
        "as_principals",
        multiple=True,
        metavar="PRINCIPAL",
        help="Draw only from documents this principal may read (repeatable).",
    )
    @click.option(
        "--out",
        default=None,
        type=click.Path(),
        help="Also write the set here: FILE.jsonl, or a folder for --format beir.",
    )
    @click.option(
        "--format",
        "fmt",
        type=click.Choice(["jsonl", "beir"]),
        default="jsonl",
        show_default=True,
        help="Format of --out.",
    )
    @click.option("--llm-base-url", default=None, help="Chat endpoint of the llm method ($QUARRY_LLM_BASE_URL).")
    @click.option("--llm-model", default=None, help="Chat model of the llm method ($QUARRY_LLM_MODEL).")
    @json_option
    @handle_errors
    def generate(db, n, method, seed, name, as_principals, out, fmt, llm_base_url, llm_model, as_json):
        """Draw a question set from the store's committed corpus and keep it with the store."""
        import quarry
        from quarry.eval.sets import export_set, generate_set

        with quarry.open(db) as idx:
            header, path = generate_set(
                idx,
                n=n,
                method=method,
                seed=seed,
                name=name,
                principals=list(as_principals) or None,
                llm_overrides={"llm_base_url": llm_base_url, "llm_model": llm_model},
            )
            if out:
                export_set(idx.store, header["name"], out, fmt)
        if as_json:
            echo_json({**header, "file": str(path), "out": out})
            return
        click.echo(
            f"{header['questions']} questions ({method}, seed {seed}, generation {header['generation']}) "
            f"in set {header['name']}: {path}" + (f"; written to {out}" if out else "")
        )
        for note in header.get("notes") or []:
            click.echo(f"  {note}")

    @eval_group.command(name="run")
    @click.argument("set_ref", metavar="SET")
    @db_option
    @click.option(
        "--mode",
        "modes",
        type=click.Choice(SEARCH_MODES),
        multiple=True,
        help="Modes to score (repeatable; default hybrid).",
    )
    @click.option(
        "--k", "k", type=click.IntRange(1, 1000), default=10, show_default=True, help="Cut of recall@k and MRR@k."
    )
    @click.option("--fusion", default=None, help="Fusion of hybrid mode (default: the search's).")
    @click.option(
        "--as",
        "as_principals",
        multiple=True,
        metavar="PRINCIPAL",
        help="Search as this principal (repeatable), as its users would.",
    )
    @click.option(
        "--fail-under",
        multiple=True,
        metavar="METRIC=VALUE",
        help="Exit 5 when a mode scores below, e.g. recall@10=0.80 (repeatable; page_/chunk_ prefixes).",
    )
    @click.option(
        "--margin",
        type=click.FloatRange(0, 1),
        default=None,
        help="Flag a metric more than this below the previous generation's score of the set.",
    )
    @click.option("--answers", is_flag=True, help="Also answer each question through the answers path and judge it.")
    @click.option(
        "--judge",
        "judge_model",
        default=None,
        metavar="MODEL",
        help="Chat model of the judge (default $QUARRY_LLM_MODEL), on $QUARRY_LLM_BASE_URL.",
    )
    @click.option("--no-record", is_flag=True, help="Do not append the results to the evals table.")
    @json_option
    @handle_errors
    def run(set_ref, db, modes, k, fusion, as_principals, fail_under, margin, answers, judge_model, no_record, as_json):
        """Score question set SET (its name in the store, or a .jsonl file): recall@k and MRR@k of the
        source document, page and chunk, per mode."""
        import quarry
        from quarry.core.errors import QualityBelowThreshold
        from quarry.eval.scoring import parse_thresholds, run_set

        parse_thresholds(fail_under)  # a bad threshold fails before any search
        answer_fn = None
        if answers or judge_model:
            from quarry.eval.judge import answers_runner

            answer_fn = answers_runner(judge_model)
        with quarry.open(db) as idx:
            result = run_set(
                idx,
                set_ref,
                modes or ("hybrid",),
                k,
                fail_under=fail_under,
                margin=margin,
                search_kwargs={"fusion": fusion} if fusion else None,
                principals=list(as_principals) or None,
                answers=answer_fn,
                record=not no_record,
            )
        if as_json:
            echo_json(result)
        else:
            print_result(result)
        if result["failed"]:
            raise QualityBelowThreshold(result["failed"])

    @eval_group.command(name="sets")
    @db_option
    @json_option
    @handle_errors
    def sets(db, as_json):
        """The question sets kept with the store."""
        from quarry.store.evals import list_sets
        from quarry.store.handle import open_store

        items = list_sets(open_store(db))
        if as_json:
            echo_json(items)
            return
        if not items:
            click.echo("no question sets: `quarry eval generate` makes one")
        for s in items:
            click.echo(
                f"{s['name']:<24} {s.get('questions', 0):>6} questions  {s.get('method')}, seed {s.get('seed')}, "
                f"generation {s.get('generation')}"
            )

    @eval_group.command(name="export")
    @click.argument("set_ref", metavar="SET")
    @click.argument("out", type=click.Path())
    @db_option
    @click.option("--format", "fmt", type=click.Choice(["jsonl", "beir"]), default="jsonl", show_default=True)
    @handle_errors
    def export(set_ref, out, db, fmt):
        """Write question set SET to OUT: a JSONL file, or a BEIR folder (queries.jsonl, qrels/test.tsv)."""
        from quarry.eval.sets import export_set
        from quarry.store.handle import open_store

        export_set(open_store(db), set_ref, out, fmt)
        click.echo(f"wrote {set_ref} to {out} ({fmt})")

    @eval_group.command(name="beir")
    @click.argument("beir_dir", type=click.Path(exists=True, file_okay=False))
    @db_option
    @click.option(
        "--mode",
        "modes",
        type=click.Choice(SEARCH_MODES),
        multiple=True,
        help="Modes to score (repeatable; default all three).",
    )
    @click.option("--split", default="test", show_default=True, help="Judgments file qrels/<split>.tsv.")
    @click.option("--limit", type=int, default=None, help="Score only the first N queries (quick checks).")
    @json_option
    @handle_errors
    def beir(beir_dir, db, modes, split, limit, as_json):
        """Index a BEIR-layout folder and report nDCG@10, recall@10/100 and MRR@10 per mode (also `quarry
        eval BEIR_DIR`); the results go to the evals table."""
        from quarry.cli import reports
        from quarry.eval.beir import run_beir_eval
        from quarry.flows.run import index as run_index

        result = run_beir_eval(
            beir_dir,
            db=db,
            modes=modes or ("bm25", "vector", "hybrid"),
            split=split,
            limit=limit,
            index=lambda paths, store: run_index(paths, store, progress=True),
        )
        echo_json(result) if as_json else reports.print_eval(result)


def print_result(result: dict) -> None:
    """``quarry eval run``: a line per mode, the judge's means under it."""
    click.echo(
        f"set {result['set']} ({result['method']}, {result['questions']} questions) on generation "
        f"{result['generation']}"
    )
    k = result["k"]
    click.echo(
        f"{'mode':<8} {'R@' + str(k):>7} {'MRR':>7} {'pageR':>7} {'pageMRR':>8} {'chunkR':>7} {'chunkMRR':>9} "
        f"{'s/100q':>7}"
    )
    for row in result["rows"]:
        m = row["metrics"]
        per100 = 100 * (row["seconds"] or 0) / max(row["questions"], 1)
        click.echo(
            f"{row['mode']:<8} {m[f'recall@{k}']:>7.3f} {m[f'mrr@{k}']:>7.3f} {m[f'page_recall@{k}']:>7.3f} "
            f"{m[f'page_mrr@{k}']:>8.3f} {m[f'chunk_recall@{k}']:>7.3f} {m[f'chunk_mrr@{k}']:>9.3f} "
            f"{per100:>7.2f}"
        )
        if row.get("judge"):
            j = row["judge"]
            click.echo(
                "    judge "
                + ", ".join(f"{c} {v:.2f}" for c, v in (j.get("means") or {}).items() if v is not None)
                + f"; {j.get('judged', 0)} judged, {j.get('failed', 0)} failed"
            )
        if row.get("flagged"):
            click.echo(f"    FLAGGED: {row['flagged']}")
