"""Scheduled re-indexing as users run it: a real minute schedule that fires, through quarry's private
Prefect server and through a real `prefect server start`; `prefect.yaml` deployed to a process work
pool and run by a real worker. Slow: each waits for the clock (about 9 minutes in all)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SAMPLE
from localserver import free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
MARKER = "Zanzibar quokka schedule marker."


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(QUARRY_EMBED_BACKEND="hash", **extra)
    return env


def _runs(db: Path, env: dict) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "runs", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    return json.loads(done.stdout) if done.returncode == 0 else []


def _wait(predicate, seconds: float, what: str, log: Path | None = None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    tail = log.read_text()[-2000:] if log and log.exists() else ""
    raise AssertionError(f"{what} within {seconds:.0f} s\n{tail}")


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _serve_and_check(tmp_path: Path, env: dict, busy: bool = True) -> None:
    """Two scheduled runs (the second picks up an edit), a run skipped while the store is busy
    (``busy``: it costs a minute's tick, and the skip does not depend on the server), SIGTERM."""
    tree, db, log = tmp_path / "tree", tmp_path / "db", tmp_path / "serve.log"
    shutil.copytree(SAMPLE, tree)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "quarry"), "serve", str(tree), "--db", str(db), "--cron", "* * * * *"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:
        _wait(lambda: [r for r in _runs(db, env) if r["status"] == "completed"], 150, "no scheduled run", log)

        if busy:
            _skip_while_busy(db, env, log)
        with open(tree / "runbooks" / "deploys.md", "a") as fh:
            fh.write(f"\n{MARKER}\n")
        edited = time.time()

        def picked_up():
            return [
                r
                for r in _runs(db, env)
                if r["status"] == "completed"
                and r["updated"] == 1
                and time.mktime(time.strptime(r["started"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone >= edited - 1
            ]

        _wait(picked_up, 90, "no scheduled run picked up the edit", log)
        children = _descendants(proc.pid)
        assert children, "quarry serve runs no child (private server or flow runs)?"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
        _wait(lambda: not [c for c in children if _alive(c)], 10, f"children left behind {children}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log.read_text()
    assert "Traceback" not in out and "stopped" in out, out[-3000:]
    search = subprocess.run(
        [
            sys.executable,
            "-m",
            "quarry.cli.main",
            "search",
            "quokka schedule marker",
            "--db",
            str(db),
            "--mode",
            "bm25",
            "--json",
            "-k",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert MARKER in json.loads(search.stdout)["results"][0]["text"]
    # the committed catalog holds every run: completed ones and the skipped one (merged at a commit)
    statuses = [r["status"] for r in _runs(db, env)]
    assert statuses.count("skipped") >= busy and statuses.count("completed") >= 2


def _skip_while_busy(db: Path, env: dict, log: Path) -> None:
    # A run that finds the store busy (here: a writer in another process) is skipped and recorded.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from quarry.store.layout import WriterLock; "
            "l = WriterLock(Path(sys.argv[1])).acquire(); print('held', flush=True); "
            "time.sleep(600)",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert holder.stdout.readline().strip() == "held"
    try:
        _wait(lambda: [r for r in _runs(db, env) if r["status"] == "skipped"], 90, "no skipped run", log)
    finally:
        holder.kill()
        holder.wait()


def test_serve_fires_on_schedule_through_the_private_server(tmp_path):
    _serve_and_check(tmp_path, _env())
    assert (tmp_path / "db" / "prefect" / "prefect.db").exists()  # the schedule and flow-run history
    assert "Traceback" not in (tmp_path / "db" / "logs" / "prefect-server.log").read_text()


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """A real `prefect server start` with its own home, as a team runs it."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = _env(PREFECT_HOME=str(home))
    log = home / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/api"
    import httpx

    def healthy():
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        _wait(healthy, 180, "prefect server start did not answer", log)
        yield {**env, "PREFECT_API_URL": url}, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_serve_fires_on_schedule_through_a_real_prefect_server(tmp_path, prefect_server):
    env, server_log = prefect_server
    _serve_and_check(tmp_path, env, busy=False)  # the private server's test runs the skip
    assert not (tmp_path / "db" / "prefect").exists()  # the user's server keeps the history
    assert "Traceback" not in server_log.read_text(), server_log.read_text()[-3000:]


def test_prefect_yaml_deployment_runs_on_schedule_with_a_process_worker(tmp_path, prefect_server):
    env, server_log = prefect_server
    tree, db = tmp_path / "tree", tmp_path / "db"
    shutil.copytree(SAMPLE, tree)
    # The project's own prefect.yaml, with only the roots, the store and the schedule set for this test.
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deployment = spec["deployments"][0]
    deployment["parameters"].update(roots=[str(tree)], db=str(db))
    deployment["schedules"] = [{"cron": "* * * * *", "timezone": "UTC"}]
    prefect_file = tmp_path / "prefect.yaml"
    prefect_file.write_text(yaml.safe_dump(spec))

    def prefect(*args):
        # From the project root, as its comments say: the pull step records this directory.
        return subprocess.run(
            [str(BIN / "prefect"), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180
        )

    pool = deployment["work_pool"]["name"]
    done = prefect("work-pool", "create", pool, "--type", "process")
    assert done.returncode == 0, done.stdout + done.stderr
    done = prefect("--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_file))
    assert done.returncode == 0, done.stdout + done.stderr
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        worker = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", pool],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:
        runs = _wait(
            lambda: [r for r in _runs(db, env) if r["status"] == "completed"],
            180,
            "the deployment's schedule ran no flow",
            log,
        )
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
    assert runs[-1]["added"] == 5
    assert not _tracebacks(server_log.read_text())


def _tracebacks(log: str) -> list[str]:
    """The server log's tracebacks, less SQLite's "database is locked" inside Prefect's own server (on
    a worker heartbeat, or while it validates a state change): its SQLite database takes one writer
    at a time, and when the machine is loaded the server logs the lock and the client's retry goes
    through (seen with other test jobs on 2 cores, and once in a CI run alone). What the run did is
    checked by the caller; any other traceback fails."""
    errors = [block for block in log.split("| ERROR")[1:] if "Traceback" in block]
    return [
        b
        for b in errors
        if not (
            "sqlite3.OperationalError) database is locked" in b
            or b.rstrip().endswith("sqlite3.OperationalError: database is locked")
        )
    ]


def test_serve_indexes_at_start_names_its_api_and_lends_it_to_one_shot_runs(tmp_path):
    """A schedule whose first tick is months away still indexes at once; `--port` fixes the private
    API's address, which serve prints; a `quarry index` of the same store meanwhile records its
    history on that server (one history per store); --no-initial-run waits for the schedule."""
    import httpx

    tree, db, log = tmp_path / "tree", tmp_path / "db", tmp_path / "serve.log"
    shutil.copytree(SAMPLE, tree)
    env, port = _env(), free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "quarry"), "serve", str(tree), "--db", str(db), "--cron", "0 0 1 1 *", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:
        _wait(lambda: [r for r in _runs(db, env) if r["status"] == "completed"], 120, "no run at start", log)
        assert f"Prefect API: http://127.0.0.1:{port}/api" in log.read_text()
        assert json.loads((db / "prefect" / "server.json").read_text())["url"] == f"http://127.0.0.1:{port}/api"
        (tree / "extra.md").write_text("# Extra\n\nA one-shot run while serve runs.\n")
        done = subprocess.run(
            [str(BIN / "quarry"), "index", str(tree), "--db", str(db), "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )
        assert done.returncode == 0 and json.loads(done.stdout)["added"] == 1, done.stderr
        flows = httpx.post(f"http://127.0.0.1:{port}/api/flow_runs/filter", json={}, timeout=10).json()
        assert len([f for f in flows if f["state_type"] == "COMPLETED"]) >= 2  # serve's first run and the one-shot
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (db / "prefect" / "server.json").exists()

    db2, log2 = tmp_path / "db2", tmp_path / "serve2.log"
    with open(log2, "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "quarry"), "serve", str(tree), "--db", str(db2), "--cron", "0 0 1 1 *", "--no-initial-run"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:
        _wait(lambda: "serving quarry-index/" in log2.read_text(), 120, "serve did not start", log2)
        time.sleep(15)  # longer than the runner's poll: a run asked for at start would have begun
        assert not (db2 / "CURRENT").exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
