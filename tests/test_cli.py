"""The CLI as a user runs it: exit codes, JSON shapes, one-line errors, help text."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import SAMPLE, shared
from quarry.cli import cli as cli_group

RESULT_KEYS = {"rank", "score", "chunk_id", "doc_id", "path", "title", "section", "header", "text", "page_start",
               "page_end", "chunk_index", "section_index", "file_type", "start_char", "end_char", "fused", "scores",
               "ranks"}
RUN_KEYS = {"run_id", "started", "finished", "status", "added", "updated", "moved", "deleted", "skipped", "failed",
            "embedded_chunks", "reused_vectors", "model_calls", "errors"}


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory, prefect_api):
    import subprocess
    import sys

    db = tmp_path_factory.mktemp("cli") / "db"
    done = subprocess.run([sys.executable, "-m", "quarry.cli", "index", str(SAMPLE), "--db", str(db)],
                          capture_output=True, text=True)
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
    runs = json.loads(cli("runs", "--db", sample_db, "--json").stdout)
    assert RUN_KEYS <= set(runs[0]) and runs[0]["added"] == 5


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["search", "x", "--db", "/nonexistent/store"], 1, "no index at /nonexistent/store"),
        (["search", "x", "--mode", "nope"], 2, "Invalid value for '--mode'"),
        (["index", "/no/such/path"], 2, "does not exist"),
        (["index", str(SAMPLE), "--embed-backend", "bogus"], 2, "unknown embedding backend 'bogus'"),
    ],
)
def test_errors_are_one_line_with_exit_codes(cli, args, code, message):
    done = cli(*args)
    assert done.returncode == code
    assert message in done.stderr
    assert "Traceback" not in done.stderr


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
    readme = (SAMPLE.parents[1] / "README.md").read_text()
    runner = CliRunner()
    for name, command in cli_group.commands.items():
        assert command.help, f"{name} has no help text"
        assert runner.invoke(cli_group, [name, "--help"]).exit_code == 0
        assert f"quarry {name}" in readme, f"README does not document `quarry {name}`"


def test_query_side_never_imports_prefect(sample_db):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from quarry.cli import cli\n"
        "for args in (['search', 'deploy', '--db', sys.argv[1]], ['status', '--db', sys.argv[1]],"
        " ['runs', '--db', sys.argv[1]]):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('prefect', 'torch')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(sample_db)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
