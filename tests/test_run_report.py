"""RunReport is the one definition of a run's counters: the runs table, the journal and
`quarry runs --json` follow it (issue 16.4)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import duckdb
import pytest
from click.testing import CliRunner

from quarry.core.models import RunReport, StageClock
from quarry.store import catalog, journal
from quarry.store.writer import insert_run

SQL_TYPES = {
    "str": "VARCHAR",
    "int": "INTEGER",
    "float": "DOUBLE",
    "datetime": "TIMESTAMP",
    "datetime | None": "TIMESTAMP",
    "list": "JSON",
    "dict": "JSON",
}


def test_the_runs_table_of_schema_sql_has_exactly_the_run_report_fields(tmp_path):
    con = catalog.create(tmp_path / "c.duckdb")
    columns = {name: kind for name, kind, *_ in con.execute("DESCRIBE runs").fetchall()}
    # by the annotation's outer type: list[dict[str, Any]] and dict[str, Any] are JSON columns
    report_fields = {f.name: SQL_TYPES[str(f.type).partition("[")[0]] for f in dataclasses.fields(RunReport)}
    assert columns == report_fields


def test_an_older_catalog_gains_the_new_run_columns(tmp_path):
    """The runs table as the first quarry made it (before LLM, OCR and runner columns)."""
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    counts = (
        "added",
        "updated",
        "moved",
        "deleted",
        "skipped",
        "unsupported",
        "failed",
        "chunks",
        "embedded_chunks",
        "reused_vectors",
        "model_calls",
        "truncated",
    )
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, started TIMESTAMP NOT NULL, finished TIMESTAMP, "
        "status VARCHAR NOT NULL, roots JSON NOT NULL, "
        + "".join(f"{c} INTEGER NOT NULL DEFAULT 0, " for c in counts)
        + "errors JSON NOT NULL, durations JSON NOT NULL, settings JSON NOT NULL)"
    )
    con.execute(
        "INSERT INTO runs (run_id, started, status, roots, added, errors, durations, settings) VALUES "
        "('old', '2025-01-01', 'completed', '[]', 3, '[]', '{\"discover_plan\": 0.5}', '{}')"
    )
    con.execute("CREATE TABLE documents (doc_id VARCHAR)")
    insert_run(con, RunReport(run_id="new", started=datetime(2026, 1, 1), runner="dask", added=2))
    assert {r[0] for r in con.execute("DESCRIBE runs").fetchall()} == {f.name for f in dataclasses.fields(RunReport)}
    rows = {r[0]: dict(zip([d[0] for d in con.description], r)) for r in con.execute("SELECT * FROM runs").fetchall()}
    old, new = RunReport.from_row(rows["old"]), RunReport.from_row(rows["new"])
    assert (old.added, old.runner, old.llm_calls, old.durations) == (3, "", 0, {"discover_plan": 0.5})
    assert (new.added, new.runner) == (2, "dask")


def test_a_report_survives_the_runs_table_and_the_journal(tmp_path):
    clock = StageClock()
    clock.add("parse", 0.5, 10)
    report = RunReport(
        run_id="r1",
        started=datetime(2026, 1, 1, 12),
        runner="threads",
        added=10,
        chunks=40,
        errors=[{"path": "/a", "error": "bad"}],
        durations=clock.as_dict(),
        settings={"runner": "threads"},
    ).finished_with(commit_seconds=0.25)
    assert report.durations["commit"]["seconds"] == 0.25 and report.durations["parse"]["rows_per_s"] == 20.0
    con = catalog.create(tmp_path / "c.duckdb")
    insert_run(con, report)
    cur = con.execute("SELECT * FROM runs")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert RunReport.from_row(row) == report
    journal.record_run(tmp_path, report)
    assert RunReport.from_row(journal.pending(tmp_path)[0]) == report


def test_quarry_runs_json_keys_are_the_report_fields_and_text_shows_the_stages(tmp_path, run_flow):
    from quarry.cli.main import cli

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.md").write_text("# A\n\nSome text about kestrels and their budget reviews.\n")
    run_flow([tree], tmp_path / "db")
    run_flow([tree], tmp_path / "db")  # nothing to do: journalled, listed all the same
    out = CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "db"), "--json"])
    assert out.exit_code == 0, out.output
    runs = json.loads(out.output)
    assert len(runs) == 2 and all(list(r) == [f.name for f in dataclasses.fields(RunReport)] for r in runs)
    assert runs[1]["runner"] == "threads" and runs[1]["durations"]["parse"]["rows"] == 1
    text = CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "db")]).output
    assert "[threads]" in text and "parse " in text and "total " in text


@pytest.mark.parametrize(
    "value,shown",
    [
        ({"parse": {"seconds": 1.5, "rows": 30, "rows_per_s": 20.0}}, "parse 1.50s 20/s"),
        ({"discover_plan": 0.25}, "discover_plan 0.25s"),  # a run recorded before per-stage rows
        ({}, ""),
    ],
)
def test_stage_line(value, shown):
    from quarry.cli.reports import _stages_line

    assert _stages_line(value) == shown


@pytest.mark.parametrize(
    "n, shown", [(1, "permissions: 1 document changed who"), (2, "permissions: 2 documents changed who")]
)
def test_permission_changes_are_counted_in_words(n, shown, capsys):
    from quarry.cli.reports import print_index_report

    keys = (
        "added",
        "updated",
        "moved",
        "deleted",
        "skipped",
        "unsupported",
        "failed",
        "chunks",
        "embedded_chunks",
        "model_calls",
        "reused_vectors",
    )
    print_index_report({**dict.fromkeys(keys, 0), "permissions_updated": n, "errors": []})
    assert shown in capsys.readouterr().out
