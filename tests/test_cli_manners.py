"""What a user meets around the engine: `quarry sql`, a SQL client holding the catalog, closed pipes,
unsupported files named, `quarry runs`' legend, `quarry doctor` on a missing store, long queries,
progress lines, and where one-shot runs keep their Prefect history."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT


def _tree(root, n=6):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"note{i}.md").write_text(f"# Note {i}\n\nThe heron colony number {i} nests by the reservoir.\n")
    return root


def _store(base):
    tree = _tree(base / "tree")
    (tree / "drawing.svg").write_text("<svg></svg>")
    (tree / "blob.xyz").write_bytes(os.urandom(300))
    db = base / "db"
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return db


@pytest.fixture
def store(prefect_api, tmp_path):
    """A store of its own, for a test that writes to it."""
    return _store(tmp_path)


@pytest.fixture(scope="module")
def read_store(prefect_api, tmp_path_factory):
    """One store for the tests that only read it (a CLI run less each)."""
    return _store(tmp_path_factory.mktemp("read-store"))


def test_quarry_sql_reads_the_current_catalog_in_every_format(cli, read_store):
    done = cli("sql", "SELECT count(*) AS n FROM documents", "--db", read_store)
    assert done.returncode == 0 and done.stdout.splitlines() == ["n", "-", "6", "(1 row)"], done.stdout
    done = cli(
        "sql", "SELECT file_type, count(*) AS n FROM chunks_full GROUP BY 1", "--db", read_store, "--format", "json"
    )
    assert json.loads(done.stdout) == [{"file_type": "md", "n": 6}]
    done = cli("sql", "SELECT path FROM documents ORDER BY path", "--db", read_store, "--format", "csv", "--limit", "2")
    assert done.stdout.splitlines()[0] == "path" and len(done.stdout.splitlines()) == 3
    done = cli("sql", "SELECT title FROM sections_full ORDER BY 1", "--db", read_store, "--format", "jsonl")
    assert json.loads(done.stdout.splitlines()[0]) == {"title": "Note 0"}


@pytest.mark.parametrize(
    "query, message",
    [
        ("DELETE FROM documents", "read-only"),
        ("SELECT nope FROM documents", "nope"),
        ("", "no SQL given"),
    ],
)
def test_quarry_sql_refuses_writes_and_bad_sql_in_one_line(cli, read_store, query, message):
    done = cli("sql", query, "--db", read_store)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert cli("status", "--db", read_store, "--json").returncode == 0


def test_a_sql_client_holding_the_catalog_read_write_is_named_and_quarry_keeps_answering(cli, store):
    catalog = json.loads((store / "CURRENT").read_text())["catalog"]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(120)",
            str(store / catalog),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        done = cli("search", "heron", "--db", store, "--mode", "bm25", "-k", "3", "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["results"], done.stderr
        doctor = cli("doctor", "--db", store)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert f"held open read-write by PID {holder.pid}" in doctor.stdout
        assert "rebuild" not in doctor.stdout + doctor.stderr and "--full" not in doctor.stdout
        assert cli("sql", "SELECT count(*) FROM documents", "--db", store).returncode == 0
        tree = store.parent / "tree"
        (tree / "more.md").write_text("# More\n\nA kingfisher.\n")
        done = cli("index", tree, "--db", store, "--json")  # a writer does not need the old catalog's lock
        assert done.returncode == 0 and json.loads(done.stdout)["added"] == 1, done.stderr
    finally:
        holder.kill()
        holder.wait()


def _piped(args: list, reader: str) -> tuple[int, str]:
    """Run ``quarry ARGS | READER`` in a shell; (quarry's exit status, its stderr)."""
    err = ROOT / ".pytest-pipe-err"
    cmd = f"{sys.executable} -m quarry.cli.main {' '.join(map(str, args))} 2>{err} | {reader}; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=os.environ, cwd=ROOT, timeout=300)
    text = err.read_text()
    err.unlink()
    return done.returncode, text


@pytest.mark.parametrize("reader", ["true", "head -1"])
def test_a_closed_pipe_ends_quietly(prefect_api, read_store, reader):
    code, err = _piped(["search", "heron", "--db", read_store, "--format", "jsonl", "-k", "6"], reader)
    assert code == 0 and "Traceback" not in err and "BrokenPipe" not in err and "error" not in err, err
    code, err = _piped(["sql", "'SELECT * FROM chunks_full'", "--db", read_store], reader)
    assert code == 0 and err == "", err


def test_an_index_run_whose_reader_goes_away_still_commits_and_keeps_its_exit_code(prefect_api, cli, tmp_path):
    tree, db = _tree(tmp_path / "tree"), tmp_path / "db"
    (tree / "bad.pdf").write_bytes(b"%PDF-1.4 not really")
    code, err = _piped(["index", tree, "--db", db], "true")
    assert code == 3 and "Traceback" not in err, err
    assert json.loads(cli("status", "--db", db, "--json").stdout)["documents"] == 6


def test_unsupported_files_are_named_in_the_run_and_its_summary(cli, store, tmp_path):
    run = json.loads(cli("runs", "--db", store, "--json").stdout)[0]
    assert run["unsupported"] == 2
    assert run["unsupported_files"] == [
        {"path": str((tmp_path / "tree" / "blob.xyz").resolve()), "reason": ".xyz is not a format quarry reads"},
        {"path": str((tmp_path / "tree" / "drawing.svg").resolve()), "reason": ".svg is not a format quarry reads"},
    ]
    (tmp_path / "tree" / "other.bin").write_bytes(b"\x00" * 10)
    done = cli("index", tmp_path / "tree", "--db", store)
    assert "unsupported: 3 files quarry does not read" in done.stdout and "drawing.svg: .svg is not" in done.stdout


def test_quarry_runs_prints_a_legend(cli, read_store):
    lines = cli("runs", "--db", read_store).stdout.splitlines()
    assert lines[0] == "counts: +added ~updated >moved -deleted =unchanged ?unsupported !failed"
    assert " +6 ~0 >0 -0 =0 ?2 !0 " in lines[1]


def test_doctor_on_a_missing_store_does_not_suggest_repair(cli, tmp_path):
    done = cli("doctor", "--db", tmp_path / "nothing-here")
    assert done.returncode == 1 and "does not exist" in done.stdout and "--repair" not in done.stdout + done.stderr


def test_a_query_longer_than_the_model_reads_is_said(prefect_api, read_store):
    from click.testing import CliRunner

    from quarry.cli.main import cli as group

    env = {"QUARRY_EMBED_BACKEND": "onnx-int8"}  # a model with a token limit; only its tokenizer is used
    done = CliRunner(env=env).invoke(group, ["search", "heron " * 3000, "--db", str(read_store), "--mode", "bm25"])
    assert "warning" not in (done.stderr or "")  # BM25 alone reads all of it
    import quarry

    with quarry.open(read_store, quarry.Settings(embed_backend="hash")) as index:
        assert index.search("heron " * 3000, mode="bm25").warnings == []
        response = index.search("heron " * 3000, mode="hybrid")
    assert response.warnings == [] or "reads only its first" in response.warnings[0]


def test_progress_lines_off_a_terminal(monkeypatch, capsys):
    from quarry.core import progress

    monkeypatch.setattr(progress, "LINE_SECONDS", 0.05)
    progress.enable(True)
    try:
        bar = progress.start("indexing", total=10)
        bar.advance(4, chunks=40, ocr_pages=2)
        time.sleep(0.3)
        bar.advance(6, chunks=90, ocr_pages=2)
        bar.stop()
    finally:
        progress.enable(False)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("indexing: 4/10 files (40%) · 40 chunks · ") and "files/s" in lines[0]
    assert "ETA " in lines[0] and lines[0].endswith("OCR 2 pages")
    assert lines[-1].startswith("indexing: 10/10 files (100%) · 90 chunks") and "ETA 0s" in lines[-1]


def test_a_one_shot_run_keeps_its_prefect_history_under_the_store(tmp_path):
    """Without PREFECT_API_URL, `quarry index` starts a private server whose database is the store's."""
    tree, db = _tree(tmp_path / "tree", 2), tmp_path / "db"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # must stay empty
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (db / "prefect" / "prefect.db").is_file()
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()


def _server(db: Path) -> dict | None:
    try:
        return json.loads((db / "prefect" / "server.json").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("zombie") < 0


def test_an_interactive_run_leaves_its_prefect_server_for_the_next_run_then_it_ends(tmp_path):
    """With QUARRY_PREFECT_LINGER (300 s by default at a terminal) the private server stays after
    `quarry index` for the next run of the store, which uses it instead of starting one, and it
    ends once no run has used it that long. Without it (not a terminal, as here) nothing stays."""
    tree, db = _tree(tmp_path / "tree", 2), tmp_path / "db"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}

    def index(linger: str | None) -> subprocess.CompletedProcess:
        run_env = {**env, **({"QUARRY_PREFECT_LINGER": linger} if linger is not None else {})}
        done = subprocess.run(
            [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db)],
            capture_output=True,
            text=True,
            env=run_env,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done

    index(None)  # not a terminal: no server stays
    assert _server(db) is None
    index("20")
    first = _server(db)
    assert first is not None and _alive(first["pid"])
    (tree / "new.md").write_text("# New\n\nA page added between the runs.\n")
    index("3")  # uses the waiting server: no new one, the same announcement
    assert _server(db) == first and _alive(first["pid"])
    import quarry

    with quarry.open(db) as idx:
        assert idx.status()["documents"] == 3 and len(idx.runs(10)) == 3
    # the lingering server was started with 20 s; it ends 20 s after the last run's lease is gone
    deadline = time.monotonic() + 180
    while _alive(first["pid"]):
        assert time.monotonic() < deadline, "the lingering Prefect server never ended"
        time.sleep(1)
    assert _server(db) is None
    assert not list((db / "prefect" / "leases").iterdir())


def test_a_lingering_server_ends_when_its_store_is_removed(tmp_path):
    tree, db = _tree(tmp_path / "tree", 1), tmp_path / "db"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db)],
        capture_output=True,
        text=True,
        env={**env, "QUARRY_PREFECT_LINGER": "600"},
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    pid = _server(db)["pid"]
    shutil.rmtree(db)
    deadline = time.monotonic() + 60
    while _alive(pid):
        assert time.monotonic() < deadline, "the lingering Prefect server outlived its store"
        time.sleep(0.5)


def test_linger_defaults_to_five_minutes_at_a_terminal_only(monkeypatch):
    from quarry.flows.orchestration import linger_seconds

    monkeypatch.delenv("QUARRY_PREFECT_LINGER", raising=False)
    for tty, expected in ((True, 300.0), (False, 0.0)):
        monkeypatch.setattr(sys.stdin, "isatty", lambda tty=tty: tty, raising=False)
        monkeypatch.setattr(sys.stdout, "isatty", lambda tty=tty: tty, raising=False)
        assert linger_seconds() == expected
    monkeypatch.setenv("QUARRY_PREFECT_LINGER", "0")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert linger_seconds() == 0.0


def test_serve_indexes_at_start_not_at_the_first_tick(prefect_api, tmp_path):
    """On the session's Prefect server: a schedule whose first tick is months away still indexes at
    once (test_schedule.py runs the private server, --port and --no-initial-run, in the slow step)."""
    import signal

    tree, db, log = _tree(tmp_path / "tree", 3), tmp_path / "db", tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "quarry.cli.main", "serve", str(tree), "--db", str(db), "--cron", "0 0 1 1 *"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 120
        while not (db / "CURRENT").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(1)
        assert f"Prefect API: {os.environ['PREFECT_API_URL']}" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    import quarry

    with quarry.open(db) as index:
        assert index.status()["documents"] == 3


def test_a_dry_run_needs_no_prefect(cli, store):
    """A dry run discovers and plans in the CLI's process: no Prefect API is asked for (here the
    one configured does not exist), so it starts fast and has nothing to drain at exit."""
    done = cli(
        "index", store.parent / "tree", "--db", store, "--dry-run", env={"PREFECT_API_URL": "http://127.0.0.1:9/api"}
    )
    assert done.returncode == 0 and done.stdout.startswith("dry run: would add 0, update 0"), done.stderr
    assert "Prefect" not in done.stderr


def test_quarry_index_twice_in_one_process_without_a_prefect_api(tmp_path):
    """A notebook indexes two stores in a row: each call starts its own private server (history under
    its store), and Prefect's log and event workers follow it instead of the first, gone server.
    The first new database is migrated by its server and kept, empty, in the cache; the second
    starts as a copy of it and holds only its own run."""
    for name in ("a", "b"):
        _tree(tmp_path / f"tree-{name}", 2)
    code = (
        "import sys, quarry\n"
        "for name in ('a', 'b'):\n"
        "    r = quarry.index(sys.argv[1] + '/tree-' + name, sys.argv[1] + '/db-' + name)\n"
        "    print(name, r['added'], flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["QUARRY_CACHE_DIR"] = str(tmp_path / "cache")
    t = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=400
    )
    assert done.returncode == 0 and done.stdout.split() == ["a", "2", "b", "2"], done.stderr[-2000:]
    assert "Still processing items" not in done.stderr and time.monotonic() - t < 300
    assert (tmp_path / "db-a" / "prefect" / "prefect.db").exists() and (
        tmp_path / "db-b" / "prefect" / "prefect.db"
    ).exists()
    (template,) = (tmp_path / "cache" / "prefect").glob("empty-*.db")
    assert _flow_runs(template) == 0
    assert _flow_runs(tmp_path / "db-a" / "prefect" / "prefect.db") == 1
    assert _flow_runs(tmp_path / "db-b" / "prefect" / "prefect.db") == 1


def _flow_runs(database) -> int:
    import sqlite3

    con = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM flow_run").fetchone()[0]
    finally:
        con.close()
