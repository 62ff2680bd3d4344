"""The CLI as a user runs it: exit codes, JSON shapes, one-line errors, help text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SAMPLE, shared

from quarry.cli.main import cli as cli_group

RESULT_KEYS = {
    "rank",
    "score",
    "chunk_id",
    "doc_id",
    "path",
    "title",
    "section",
    "header",
    "text",
    "page_start",
    "page_end",
    "chunk_index",
    "section_index",
    "file_type",
    "start_char",
    "end_char",
    "fused",
    "scores",
    "ranks",
    "match",
    "copies",
    "copies_total",
}
RUN_KEYS = {
    "run_id",
    "started",
    "finished",
    "status",
    "added",
    "updated",
    "moved",
    "deleted",
    "skipped",
    "failed",
    "embedded_chunks",
    "reused_vectors",
    "model_calls",
    "errors",
}


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory, prefect_api):
    import subprocess
    import sys

    db = tmp_path_factory.mktemp("cli") / "db"
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(SAMPLE), "--db", str(db)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return db


def test_index_formats_exits_3_and_names_the_bad_file(cli, tmp_path):
    done = cli("index", shared("formats"), "--db", tmp_path / "db")
    assert done.returncode == 3
    assert "password.pdf: encrypted PDF" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_search_json_shape(cli, sample_db):
    done = cli("search", "roll back a deploy", "--db", sample_db, "--json", "-k", "3")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["query"] == "roll back a deploy" and out["mode"] == "hybrid"
    assert len(out["results"]) == 3
    for r in out["results"]:
        assert set(r) == RESULT_KEYS
        assert set(r["scores"]) == set(r["ranks"]) == {"vector", "bm25"}
    assert [r["rank"] for r in out["results"]] == [1, 2, 3]


@pytest.mark.parametrize("mode", ["vector", "bm25"])
def test_single_retriever_modes_have_the_same_shape(cli, sample_db, mode):
    out = json.loads(cli("search", "expenses", "--db", sample_db, "--json", "--mode", mode).stdout)
    other = "bm25" if mode == "vector" else "vector"
    assert out["results"] and all(r["scores"][other] is None and r["ranks"][mode] for r in out["results"])


def test_status_and_runs_json(cli, sample_db):
    status = json.loads(cli("status", "--db", sample_db, "--json").stdout)
    assert status["documents"] == 5 and status["model"] == "quarry-hash-64" and status["dim"] == 64
    assert status["embedder"] == {"backend": "hash", "variant": None}
    runs = json.loads(cli("runs", "--db", sample_db, "--json").stdout)
    assert RUN_KEYS <= set(runs[0]) and runs[0]["added"] == 5


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["search", "x", "--db", "/nonexistent/store"], 1, "no index at /nonexistent/store"),
        (["search", "x", "--mode", "nope"], 2, "Invalid value for '--mode'"),
        (["index", "/no/such/path"], 2, "path not found: /no/such/path"),
        (["index", str(SAMPLE), "--embed-backend", "bogus"], 2, "Invalid value for '--embed-backend'"),
        (["search", "x", "--bogus"], 2, "No such option '--bogus' (see `quarry search --help`)"),
        (["keys", "create"], 2, "Missing argument 'NAME'"),
        (["keys", "create", "x", "--db", "/nonexistent/store"], 1, "no store at /nonexistent/store"),
        (["keys", "list", "--db", "/nonexistent/store"], 1, "no store at /nonexistent/store"),
        (["keys", "revoke", "x", "--db", "/nonexistent/store"], 1, "no store at /nonexistent/store"),
        (
            ["keys", "create", "x", "--admin", "--principal", "group:a", "--db", "/nonexistent/store"],
            2,
            "give --admin or --principal, not both",
        ),
        (["api", "--db", "/nonexistent/store", "--rerank", "bogus:thing"], 2, "--rerank bogus:thing"),
    ],
)
def test_errors_are_one_line_with_exit_codes(cli, args, code, message):
    done = cli(*args)
    assert done.returncode == code
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "| WARNING |" not in line]  # Prefect's own log lines
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert not Path("/nonexistent").exists()


def test_model_mismatch_is_refused(cli, sample_db):
    done = cli("search", "x", "--db", sample_db, env={"QUARRY_EMBED_BACKEND": "hash", "QUARRY_EMBED_DIM": "32"})
    assert done.returncode == 1 and "built with quarry-hash-64" in done.stderr


def test_second_writer_is_refused_while_locked(cli, sample_db):
    from quarry.store.layout import WriterLock

    with WriterLock(sample_db):
        # The lock is re-entrant in this process only: a second process must fail fast.
        done = cli("index", SAMPLE, "--db", sample_db)
    assert done.returncode == 1 and "locked by another index run" in done.stderr


def test_every_command_has_help_and_is_documented():
    root = SAMPLE.parents[1]
    docs = "\n".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    runner = CliRunner()
    for name, command in cli_group.commands.items():
        assert command.help, f"{name} has no help text"
        assert runner.invoke(cli_group, [name, "--help"]).exit_code == 0
        assert f"quarry {name}" in docs, f"neither README.md nor docs/ document `quarry {name}`"


def test_query_side_never_imports_prefect(sample_db):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from quarry.cli.main import cli\n"
        "for args in (['search', 'deploy', '--db', sys.argv[1]], ['status', '--db', sys.argv[1]],"
        " ['runs', '--db', sys.argv[1]]):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('prefect', 'torch')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(sample_db)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("command", "param", "choices"),
    [
        ("index", "embed_backend", ("torch", "onnx", "onnx-int8", "openai", "hash")),
        ("index", "sectioner", ("structure", "semantic", "llm")),
        ("index", "context_writer", ("rules", "llm")),
        ("search", "mode", ("hybrid", "vector", "bm25")),
        ("search", "fusion", ("tmm", "rrf")),
        ("export", "fmt", ("parquet", "jsonl")),
    ],
)
def test_enum_flags_list_their_choices_in_help(command, param, choices):
    import click

    option = next(p for p in cli_group.commands[command].params if p.name == param)
    assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == choices
    help_text = CliRunner().invoke(cli_group, [command, "--help"]).output
    assert "[" + "|".join(choices) + "]" in help_text


def test_shell_completion_offers_the_backends():
    env = {"_QUARRY_COMPLETE": "bash_complete", "COMP_WORDS": "quarry index --embed-backend o", "COMP_CWORD": "3"}
    result = CliRunner().invoke(cli_group, [], prog_name="quarry", env=env)
    assert result.output.split() == ["plain,onnx", "plain,onnx-int8", "plain,openai"]


@pytest.mark.parametrize("args", [["--log-level", "info"], ["-v"], ["-vv"]])
def test_log_level_flags_are_accepted(args, monkeypatch):
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "WARNING")  # restored after the test
    result = CliRunner().invoke(cli_group, [*args, "status", "--help"])
    assert result.exit_code == 0, result.output
    assert __import__("os").environ["PREFECT_LOGGING_LEVEL"] in ("INFO", "DEBUG")


def test_python_dash_m_quarry_is_the_cli():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "quarry", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "Commands:" in done.stdout and "_QUARRY_COMPLETE" in done.stdout


def test_db_help_names_every_kind_of_store():
    from click.testing import CliRunner

    from quarry.cli.main import cli

    out = CliRunner().invoke(cli, ["search", "--help"], terminal_width=200).output
    assert all(scheme in out for scheme in ("s3://", "gs://", "az://")), out
