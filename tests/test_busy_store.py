"""A run that meets a busy store: skipped and recorded (scheduled runs, `--if-busy skip`), never a second
writer; the run journal survives races and crashes and ends up in the runs table."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import time
from datetime import datetime

import duckdb
import pytest
from conftest import SAMPLE
from quarry.flows.orchestration import deployment_name, validate_cron

from quarry.core.errors import StoreLocked, UsageError
from quarry.store import journal
from quarry.store.layout import WriterLock, new_run_id
from quarry.store.writer import insert_run


def _row(run_id: str, started: str = "2026-01-01T00:00:00") -> dict:
    return journal.skipped_row(
        run_id,
        datetime.fromisoformat(started),
        datetime.fromisoformat(started),
        ["/r"],
        "store busy",
        {"embed_backend": "hash"},
    )


def test_journal_claim_and_merge_into_a_real_runs_table(tmp_path):
    journal.record(tmp_path, _row("a"))
    journal.record(tmp_path, _row("b"))
    assert [r["run_id"] for r in journal.pending(tmp_path)] == ["a", "b"]
    rows, files = journal.claim(tmp_path, 7)
    assert [r["run_id"] for r in rows] == ["a", "b"] and [f.name for f in files] == ["run-journal.claimed-000007.jsonl"]
    journal.record(tmp_path, _row("c"))  # a skip after the claim starts a new journal
    assert [r["run_id"] for r in journal.pending(tmp_path)] == ["a", "b", "c"]

    con = duckdb.connect(str(tmp_path / "catalog.duckdb"))
    from quarry.core.sqlfiles import statements

    for stmt in statements("schema"):
        con.execute(stmt)
    assert journal.merge(con, rows, insert_run) == 2
    assert journal.merge(con, rows, insert_run) == 0  # a crash between rename and delete: no duplicates
    got = con.execute("SELECT run_id, status, errors FROM runs ORDER BY run_id").fetchall()
    assert [(r[0], r[1]) for r in got] == [("a", "skipped"), ("b", "skipped")]
    assert json.loads(got[0][2]) == [{"path": None, "error": "store busy"}]
    journal.forget(files)
    assert [r["run_id"] for r in journal.pending(tmp_path)] == ["c"]


def test_a_torn_last_line_is_ignored(tmp_path):
    journal.record(tmp_path, _row("a"))
    with open(tmp_path / journal.JOURNAL, "a") as fh:
        fh.write('{"run_id": "half')
    assert [r["run_id"] for r in journal.pending(tmp_path)] == ["a"]


def _append_many(store, start, n):
    for i in range(start, start + n):
        journal.record(store, _row(f"r{i:04d}"))


def test_no_skip_is_lost_while_commits_claim_the_journal(tmp_path):
    procs = [
        multiprocessing.get_context("spawn").Process(target=_append_many, args=(tmp_path, k * 100, 100))
        for k in range(2)
    ]
    for p in procs:
        p.start()
    seen, gen = [], 0
    while any(p.is_alive() for p in procs):
        gen += 1
        rows, files = journal.claim(tmp_path, gen)
        seen += [r["run_id"] for r in rows]
        journal.forget(files)
    for p in procs:
        p.join()
    rows, files = journal.claim(tmp_path, gen + 1)
    seen += [r["run_id"] for r in rows]
    assert sorted(seen) == [f"r{i:04d}" for i in range(200)]


def test_index_flow_skips_a_busy_store_and_the_next_commit_records_it(run_flow, tmp_path):
    tree, db = tmp_path / "tree", tmp_path / "db"
    shutil.copytree(SAMPLE, tree)
    assert run_flow([tree], db)["status"] == "completed"
    # The lock is re-entrant within a process, so the other writer is another process, as in real life.
    holder = multiprocessing.get_context("spawn").Process(target=_hold_lock, args=(str(db), 20))
    ready = tmp_path / "db" / "lock"
    holder.start()
    try:
        _wait_for_holder(ready)
        with pytest.raises(StoreLocked):
            run_flow([tree], db)
        report = run_flow([tree], db, if_busy="skip")
        assert report["status"] == "skipped" and "locked by another index run" in report["errors"][0]["error"]
    finally:
        holder.terminate()
        holder.join()
    import quarry

    with quarry.open(db) as idx:
        runs = idx.runs()
    assert [r["status"] for r in runs] == ["skipped", "completed"]  # listed before the next commit
    assert run_flow([tree], db)["status"] == "completed"  # nothing to do: journalled too
    with open(tree / "runbooks" / "deploys.md", "a") as fh:
        fh.write("\nOne more line.\n")
    assert run_flow([tree], db)["updated"] == 1  # a commit: it moves the journal into the runs table
    with quarry.open(db) as idx:
        info = idx.status()
    con = duckdb.connect(info["catalog"], read_only=True)
    for attach in info["catalog_attach"]:  # the earlier catalog layers a delta builds on
        con.execute(attach)
    statuses = [r[0] for r in con.execute("SELECT status FROM runs ORDER BY started").fetchall()]
    con.close()
    assert statuses == ["completed", "skipped", "completed", "completed"]
    assert not list(db.glob("run-journal*"))


def _hold_lock(db: str, seconds: float, owner: dict | None = None) -> None:
    import time
    from pathlib import Path

    # the way a flow run takes it: the owner reaches the lock file through hold_or_skip
    lock, _ = journal.hold_or_skip(Path(db), "fail", new_run_id(), datetime.now(), ["/r"], {}, owner)
    assert lock is not None
    time.sleep(seconds)


def _held_by(db, owner: dict | None):
    holder = multiprocessing.get_context("spawn").Process(target=_hold_lock, args=(str(db), 60, owner))
    holder.start()
    for _ in range(400):  # the lock file names this holder (a killed one leaves its own text behind)
        text = (db / "lock").read_text() if (db / "lock").exists() else ""
        if text.strip() and json.loads(text)["pid"] == holder.pid:
            return holder
        time.sleep(0.05)
    raise AssertionError("the lock holder did not start")


def test_a_tick_that_meets_its_own_initial_run_is_not_recorded(tmp_path):
    """The run `quarry serve` starts at once holds the store when the schedule's first tick comes:
    that tick stands down without a `skipped` row. Any other holder still gets one."""
    db = tmp_path / "db"
    db.mkdir()
    holder = _held_by(db, {"deployment": "d-1", "initial_run": True})
    try:
        with pytest.raises(StoreLocked) as caught:
            WriterLock(db).acquire()
        assert caught.value.holder["deployment"] == "d-1" and caught.value.holder["initial_run"] is True
        assert "locked by another index run (pid " in str(caught.value)  # the message still names the holder

        def skip(owner):
            return journal.hold_or_skip(db, "skip", new_run_id(), datetime.now(), ["/r"], {}, owner)

        lock, row = skip({"deployment": "d-1", "initial_run": False})
        assert (
            lock is None and row["status"] == "skipped" and "initial run of this schedule" in row["errors"][0]["error"]
        )
        assert journal.pending(db) == []  # a tick of the same schedule: not listed
        for owner in ({"deployment": "d-2", "initial_run": False}, None, {}):  # another schedule, a CLI run
            assert skip(owner)[0] is None
        assert len(journal.pending(db)) == 3
        with pytest.raises(StoreLocked):  # --if-busy fail is unchanged
            journal.hold_or_skip(db, "fail", new_run_id(), datetime.now(), ["/r"], {}, {"deployment": "d-1"})
    finally:
        holder.terminate()
        holder.join()
    holder = _held_by(db, {"deployment": "d-1", "initial_run": False})  # a scheduled run, longer than the interval
    try:
        lock, _ = journal.hold_or_skip(db, "skip", new_run_id(), datetime.now(), ["/r"], {}, {"deployment": "d-1"})
        assert lock is None and len(journal.pending(db)) == 4
    finally:
        holder.terminate()
        holder.join()


def test_the_flow_passes_who_it_is_to_the_busy_check(run_flow, tmp_path, monkeypatch):
    """index_flow hands its owner to hold_or_skip: a tick (same deployment, no tag) that meets the
    initial run finishes as skipped with nothing journalled."""
    import quarry.flows.index as index

    tree, db = tmp_path / "tree", tmp_path / "db"
    shutil.copytree(SAMPLE, tree)
    holder = _held_by(db, {"deployment": "d-1", "initial_run": True})
    monkeypatch.setattr(index, "_owner", lambda: {"deployment": "d-1", "initial_run": False})
    try:
        report = run_flow([tree], db, if_busy="skip")
        assert report["status"] == "skipped" and "initial run of this schedule" in report["errors"][0]["error"]
        assert journal.pending(db) == []
        monkeypatch.setattr(index, "_owner", dict)  # a run of no deployment: journalled
        assert run_flow([tree], db, if_busy="skip")["status"] == "skipped"
        assert len(journal.pending(db)) == 1
    finally:
        holder.terminate()
        holder.join()


def test_owner_comes_from_the_flow_runs_own_context(monkeypatch):
    """No API call: the deployment id and tags of the run's context; nothing outside a deployment."""
    import uuid
    from types import SimpleNamespace

    import prefect.context
    from quarry.flows.index import INITIAL_RUN_TAG, _owner

    assert _owner() == {}  # no flow run here
    deployment = uuid.uuid4()
    context = SimpleNamespace(flow_run=SimpleNamespace(deployment_id=deployment, tags=["x", INITIAL_RUN_TAG]))
    monkeypatch.setattr(prefect.context.FlowRunContext, "get", classmethod(lambda cls: context))
    assert _owner() == {"deployment": str(deployment), "initial_run": True}
    context.flow_run.tags = ["auto-scheduled"]
    assert _owner() == {"deployment": str(deployment), "initial_run": False}
    context.flow_run.deployment_id = None  # an in-process run, a notebook's
    assert _owner() == {}


def _wait_for_holder(lock_file) -> None:
    import time

    for _ in range(200):
        if lock_file.exists() and lock_file.read_text().strip():
            return
        time.sleep(0.05)
    raise AssertionError("the lock holder did not start")


def test_cli_if_busy(cli, tmp_path):
    db = tmp_path / "db"
    holder = multiprocessing.get_context("spawn").Process(target=_hold_lock, args=(str(db), 30))
    holder.start()
    try:
        _wait_for_holder(db / "lock")
        done = cli("index", SAMPLE, "--db", db)
        assert done.returncode == 1 and "locked by another index run (pid" in done.stderr
        done = cli("index", SAMPLE, "--db", db, "--if-busy", "skip")
        assert done.returncode == 0 and done.stdout.startswith("skipped: store"), done.stderr
    finally:
        holder.terminate()
        holder.join()
    assert [r["status"] for r in journal.pending(db)] == ["skipped"]


@pytest.mark.parametrize("expr", ["* * * * *", "*/15 * * * *", "0 3 * * 1-5", "@daily", "@hourly"])
def test_cron_accepts_what_prefect_schedules(expr):
    validate_cron(expr)


@pytest.mark.parametrize("expr", ["61 * * * *", "* * * *", "every minute", "H * * * *", ""])
def test_cron_rejects_with_a_usage_error(expr):
    with pytest.raises(UsageError, match="not a valid cron schedule"):
        validate_cron(expr)


def test_deployment_name_is_one_per_store(tmp_path):
    a, b = deployment_name(tmp_path / "a"), deployment_name(tmp_path / "b")
    assert a != b and a == deployment_name(tmp_path / "a") and a.startswith("quarry-index-")
    assert new_run_id() != new_run_id()
