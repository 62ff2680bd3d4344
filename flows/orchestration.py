"""Running the index flow from the CLI: a private Prefect API server tied to this process.

Without ``PREFECT_API_URL`` Prefect would start a temporary server that outlives a killed
parent and prints tracebacks at exit. quarry instead starts the same server itself, in a
child that exits when its parent dies (even by SIGKILL), with its output in the store's
``logs/`` folder. Its functions import Prefect when called (the module itself does not); the
query path never calls them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path
from typing import Any

from quarry.core.errors import QuarryError, UsageError


def startup_timeout() -> float:
    """Seconds to wait for a private Prefect server (``QUARRY_PREFECT_STARTUP_TIMEOUT``)."""
    from quarry.core.environment import environment

    return environment().prefect_startup_timeout


def prefect_environment() -> None:
    """Settings that keep Prefect quiet and offline; the user's explicit values win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # quarry prints its own one-line errors and summaries; Prefect's console output would
    # repeat them with tracebacks. Task retries still reach the Prefect API's run logs.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    # Prefect's internal services (the events worker draining its queue at exit) log on a logger of
    # their own, whatever PREFECT_LOGGING_LEVEL says: their warnings are no business of a user's
    os.environ.setdefault("PREFECT_INTERNAL_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_UI_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _flush_prefect_logs() -> None:
    """Send buffered events while the server still listens, and stop the worker that sends them.
    Else Prefect retries them at exit against a server that is gone (minutes of "EventsWorker -
    Still processing items"), and a later call in the same process (a notebook, a scheduler's
    worker) finds a worker still bound to that dead server."""
    # Prefect's log worker is not drained here: quarry's code called a flush that always raised, so
    # its drain never ran, and when it did (after mypy found the bad call) `make test` failed once
    # with an event left queued at exit (test_quarry_index_twice_in_one_process_without_a_prefect_api).
    # Run logs stay in the log files (<store>/logs); draining them needs its own measured change.
    if "prefect.events.worker" in sys.modules:
        try:
            from prefect.events.worker import EventsWorker

            EventsWorker.drain_all(timeout=10, at_exit=False)
        except Exception:  # noqa: BLE001, S110 - draining events at exit is best effort: the run's result is decided
            pass


SERVER_FILE = "server.json"  # <store>/prefect/server.json: the API of a running `quarry serve`


def serving_api(store: Path) -> str | None:
    """The API URL of the private Prefect server a running ``quarry serve`` of ``store`` announced
    (``<store>/prefect/server.json``), or None when there is none or it does not answer."""
    import json

    try:
        info = json.loads((store / "prefect" / SERVER_FILE).read_text(encoding="utf-8"))
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    import httpx

    try:
        return info["url"] if httpx.get(f"{info['url']}/health", timeout=2).status_code == 200 else None
    except httpx.HTTPError:
        return None


@contextlib.contextmanager
def prefect_api(
    log_dir: Path,
    services: bool = False,
    database: Path | None = None,
    check=None,
    port: int | None = None,
    announce: Path | None = None,
    metrics: tuple[str, float] | None = None,
    linger: float = 0.0,
):
    """Yield with ``PREFECT_API_URL`` pointing at a reachable Prefect API.

    Uses the user's server when ``PREFECT_API_URL`` is set; otherwise starts a private one, on
    127.0.0.1 at ``port`` (default: a free one). ``services`` runs Prefect's background services
    in it (the scheduler that turns schedules into flow runs: ``quarry serve`` needs it; a one-shot
    run does not). ``database`` is the private server's SQLite file (default: Prefect's own, under
    ``PREFECT_HOME``). ``announce``: a file that names the private server (URL and this process)
    while it runs, so that one-shot runs of the same store use it. ``check`` is called once
    ``PREFECT_API_URL`` is set and before waiting for the server: Prefect reads its settings once,
    at import, so work that imports Prefect must not come earlier. ``metrics``: (store, schedule
    seconds): the private server also answers ``/metrics`` with the store's run metrics.
    ``linger`` (seconds, with ``announce``): the private server stays after this process for the
    next run, which finds it through ``announce``, and ends once no run has used it that long
    (``flows/prefect_server.py``); the announcement then names the server's own process.
    """
    prefect_environment()
    if os.environ.get("PREFECT_API_URL"):
        if check is not None:
            check()
        yield os.environ["PREFECT_API_URL"]
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    if port is not None:
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as exc:
                raise QuarryError(
                    f"cannot serve the Prefect API on 127.0.0.1:{port}: {exc.strerror or exc}; choose another --port"
                ) from None
    port = port or _free_port()
    log = open(log_dir / "prefect-server.log", "ab")
    env = dict(os.environ)
    template = None
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{database}"
        template = _seed_database(database)
        if template is None and _current(database):  # its schema and blocks are this Prefect's already
            for name, value in LEAN_START.items():
                env.setdefault(name, value)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "quarry.flows.prefect_server",
            str(port),
            str(os.getpid()),
            *(["--services"] if services else []),
            *(["--metrics", metrics[0], str(metrics[1])] if metrics else []),
            *(["--linger", str(linger), str(announce)] if linger and announce is not None else []),
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # Ctrl-C goes to quarry, which then stops the server cleanly
    )
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + startup_timeout()
    try:
        os.environ["PREFECT_API_URL"] = url
        if check is not None:
            check()
        _wait_for(proc, url, deadline, log_dir / "prefect-server.log")
        if template is not None and database is not None:  # a template is made only for a database
            _save_template(database, template)
        if announce is not None:
            import json

            announce.parent.mkdir(parents=True, exist_ok=True)
            tmp = announce.with_name(f".{announce.name}.{os.getpid()}.tmp")
            owner = proc.pid if linger else os.getpid()
            tmp.write_text(json.dumps({"url": url, "pid": owner}), encoding="utf-8")
            os.replace(tmp, announce)
        yield url
    finally:
        if announce is not None:
            with contextlib.suppress(OSError):
                if f'"pid": {os.getpid()}' in announce.read_text(encoding="utf-8"):
                    announce.unlink()
        _flush_prefect_logs()
        os.environ.pop("PREFECT_API_URL", None)
        if linger and announce is not None and proc.poll() is None and _announced(announce, proc.pid):
            proc.returncode = 0  # it stays for the next run; Popen must not warn that it still runs
        else:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def _announced(announce: Path, pid: int) -> bool:
    with contextlib.suppress(OSError):
        return f'"pid": {pid}' in announce.read_text(encoding="utf-8")
    return False


def linger_seconds() -> float:
    """How long an index run's private Prefect server stays for the next run of the store
    (``QUARRY_PREFECT_LINGER``): 300 s when quarry runs at a terminal (a person who will run the
    next command soon), none otherwise (a schedule, a script, a test)."""
    from quarry.core.environment import environment

    chosen = environment().prefect_linger
    if chosen is not None:
        return chosen
    return 300.0 if sys.stdin.isatty() and sys.stdout.isatty() else 0.0


@contextlib.contextmanager
def lease(store: Path):
    """Hold a lease on a lingering private server of ``store`` while the block runs: taken before
    the announcement is read, so the server cannot end between the read and the run."""
    leases = store / "prefect" / "leases"
    path = leases / str(os.getpid())
    held = True
    try:
        leases.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        held = False
    try:
        yield
    finally:
        if held:
            with contextlib.suppress(OSError):
                path.unlink()


def _wait_for(proc: subprocess.Popen, url: str, deadline: float, log: Path) -> None:
    """Poll the server's health until it answers. One client for every poll: a new one builds an
    SSL context each time (tens of milliseconds of CPU, taken from the server it waits for)."""
    import httpx

    with httpx.Client(timeout=2) as client:
        while True:
            if proc.poll() is not None:
                raise QuarryError(f"the Prefect server failed to start; see {log}")
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise QuarryError(f"the Prefect server did not start within {startup_timeout():.0f} s")
            time.sleep(0.05)


# A server on a database this Prefect version has migrated and registered its block types in already
# (a copy of the kept empty one, or a store's own after its first run) skips both at start: the
# migration check, and the block registration that imports every installed Prefect collection
# (prefect-dask: Dask) to hash them, because Prefect's memo of it is per database URL, so it ran
# on every new store.
LEAN_START = {
    "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false",
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
}


def _revision(database: Path) -> str | None:
    """The Alembic revision of a Prefect SQLite database (None when it has none or cannot be read)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _current(database: Path) -> bool:
    """Whether ``database`` is at the revision of the kept empty database of this Prefect version,
    which a server of this version migrated and registered the block types in."""
    template = _template()
    if not (database.is_file() and template.is_file()):
        return False
    revision = _revision(template)
    return revision is not None and _revision(database) == revision


def _template() -> Path:
    """Where the empty, migrated Prefect database of this Prefect version is kept: beside the
    built models (``QUARRY_CACHE_DIR``, default ``~/.cache/quarry``)."""
    from importlib.metadata import version

    from quarry.core.environment import environment

    base = environment().cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "quarry")
    return Path(base) / "prefect" / f"empty-{version('prefect')}.db"


def _seed_database(database: Path) -> Path | None:
    """A new store's Prefect database starts as a copy of an empty one of the same Prefect version,
    already migrated: a server on a new database runs every migration of Prefect's schema first
    (measured on 2 cores: 21 s to answer, against 9 s from a copy). Returns where to save that
    empty database once the server has made it, when no copy could be taken; else None."""
    if database.exists():
        return None
    template = _template()
    if not template.is_file() and not _restore_shipped(template):
        return template
    tmp = database.with_name(f".{database.name}.{os.getpid()}.tmp")
    try:
        import shutil

        for stale in ("-wal", "-shm"):  # a journal left without its database must not meet the copy
            with contextlib.suppress(FileNotFoundError):
                database.with_name(database.name + stale).unlink()
        shutil.copyfile(template, tmp)
        os.replace(tmp, database)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return None


def _shipped() -> Path:
    """The empty, migrated database of the installed Prefect version as SQL, shipped beside this
    module (``flows/prefect-empty-<version>.sql.gz``; ``make prefect-db`` writes it for the pinned
    version). Another version has none, and its first server migrates as before."""
    from importlib.metadata import version

    return Path(__file__).with_name(f"prefect-empty-{version('prefect')}.sql.gz")


def _restore_shipped(template: Path) -> bool:
    """Make the kept empty database from the shipped SQL (about 50 ms; a server's migrations take
    seconds), so that even a user's first store starts from a copy. False when there is none."""
    import gzip
    import sqlite3

    shipped = _shipped()
    if not shipped.is_file():
        return False
    tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        script = gzip.decompress(shipped.read_bytes()).decode("utf-8")
        con = sqlite3.connect(tmp)
        try:
            con.executescript(script)
        finally:
            con.close()
        os.replace(tmp, template)
        return True
    except (OSError, EOFError, UnicodeDecodeError, sqlite3.Error):
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False


def dump_template(out: Path | None = None) -> Path:
    """Write the kept empty database of the installed Prefect version as the shipped SQL
    (``make prefect-db``): byte for byte the same for the same database."""
    import gzip
    import sqlite3

    out = out or _shipped()
    con = sqlite3.connect(f"file:{_template()}?mode=ro", uri=True)
    try:
        script = "\n".join(con.iterdump()) + "\n"
    finally:
        con.close()
    out.write_bytes(gzip.compress(script.encode("utf-8"), mtime=0))
    return out


def _save_template(database: Path, template: Path) -> None:
    """Keep a copy of the database a server has just created and migrated, before any run wrote
    to it (SQLite's online backup: the server holds it open). A failure only costs the next new
    store the migrations again."""
    import sqlite3

    tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        source = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:
            target = sqlite3.connect(tmp)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
        os.replace(tmp, template)
    except (OSError, sqlite3.Error):
        with contextlib.suppress(OSError):
            tmp.unlink()


# What a warm process imports (``flows/warm.py``): the flow, the store, the embedders' runtimes, Prefect's engine.
WARM_MODULES = (
    "quarry.flows.index",
    "quarry.store.writer",
    "quarry.tasks.load",
    "quarry.ingest.embedders.local",
    "quarry.ingest.embedders.onnx_backend",
    "quarry.ingest.facets",
    "quarry.ingest.llm.context",
    "quarry.sql",
    "lancedb",
    "duckdb",
    "pyarrow",
    "numpy",
    "numpy.ma",
    "onnxruntime",
    "tokenizers",
    "prefect.flow_engine",
    "prefect.client.orchestration",
    "prefect.task_engine",
    "prefect.utilities.visualization",
    "fastapi",
)
# numpy.ma: what pyarrow imports to convert the run's vectors; prefect.utilities.visualization:
# what calling a flow imports (graphviz). Each imported in every forked run otherwise (~10 ms).


def warm_context():
    """A multiprocessing context whose processes fork from a server process (multiprocessing's
    ``forkserver``) that imported what a run needs once, when first used (``quarry.flows.warm``).

    Each scheduled run of ``quarry serve`` still gets a process of its own (a run that crashes or
    is cancelled takes nothing else with it), but starts with its imports done rather than in a
    new interpreter that pays them every time. The server process only imports (see
    ``flows/warm.py`` for why forking from it is safe) and exits with its parent.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["quarry.flows.warm"])
    return ctx


@contextlib.contextmanager
def warm_flow_runs():
    """While open, Prefect's runner starts each flow run it executes in a :func:`warm_context`
    process instead of a new interpreter (its ``run_flow_in_subprocess`` asks for the ``spawn``
    context; inside ``prefect.flow_engine`` that request gets the warm one). The flow run,
    its environment and its control channel are Prefect's, unchanged."""
    import multiprocessing

    import prefect.flow_engine as engine

    if "forkserver" not in multiprocessing.get_all_start_methods():  # Windows: Prefect's spawn, as before
        yield None
        return
    warm = warm_context()

    class _Multiprocessing:
        def __getattr__(self, name):
            return getattr(multiprocessing, name)

        @staticmethod
        def get_context(method=None):
            return warm if method == "spawn" else multiprocessing.get_context(method)

    saved = engine.multiprocessing
    engine.multiprocessing = _Multiprocessing()  # type: ignore[assignment]  # the module, but for get_context
    try:
        yield warm
    finally:
        engine.multiprocessing = saved


def validate_cron(expr: str, timezone: str | None = None) -> None:
    """Raise :class:`UsageError` unless Prefect's scheduler accepts ``expr``: validating with the
    schedule type the deployment uses accepts exactly what it runs, five-field expressions and the
    ``@hourly``/``@daily``/… nicknames alike."""
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=expr, timezone=timezone)
    except ValidationError as exc:
        reason = "; ".join(str(err.get("msg", "")).removeprefix("Value error, ") for err in exc.errors())
        raise UsageError(f"--cron {expr!r} is not a valid cron schedule: {reason}") from None


_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def schedule_seconds(expr: str) -> float:
    """The longest gap between the next few ticks of ``expr``: the interval the stale-index gauge
    and alert count in (an irregular schedule counts its longest gap)."""
    from datetime import datetime

    from cronsim import CronSim

    ticks = CronSim(_NICKNAMES.get(expr.strip().lower(), expr), datetime.now(UTC))
    times = [next(ticks) for _ in range(9)]
    return max((b - a).total_seconds() for a, b in zip(times, times[1:]))


def deployment_name(store: Path) -> str:
    """A deployment name per store, so that two stores served by one Prefect server never share one."""
    import hashlib

    return f"quarry-index-{hashlib.sha256(str(store).encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def serve_index(
    roots: list[str],
    store: Path,
    cron: str,
    name: str | None = None,
    overrides: dict | None = None,
    on_start=None,
    initial_run: bool = True,
    evaluate: dict | None = None,
) -> None:
    """Run the index flow on ``cron`` until SIGTERM or SIGINT (Ctrl-C); needs :func:`prefect_api`.

    ``initial_run``: one run of the deployment starts now, not at the first tick of ``cron`` (a
    store served ``@daily`` would otherwise stay empty, or stale, for up to a day).

    Each scheduled run skips, recorded as a ``skipped`` run, when the store is still busy (a run
    longer than the interval, or a manual ``quarry index``); a tick that falls during the initial
    run is only logged (that run is doing its work). SIGTERM takes the same path as
    Ctrl-C: polling stops, an in-flight run is stopped (the store keeps its last commit: a run is
    crash-safe at every point) and the function returns, so the caller stops its private server.
    """
    import asyncio
    import signal

    from prefect.runner import Runner
    from quarry.flows.index import INITIAL_RUN_TAG, index_flow

    class _Runner(Runner):
        loop: asyncio.AbstractEventLoop | None = None

        def stop_soon(self) -> None:
            """Stop from a signal handler: cancel in-flight runs, end polling, return from start()."""
            loop = self.loop
            if loop is not None and not getattr(self, "stopping", False):
                self.stopping = True
                loop.call_soon_threadsafe(lambda: loop.create_task(self.astop()))

        def handle_sigterm(self, *args, **kwargs):
            # Prefect's own handler calls a coroutine without awaiting it and exits from inside
            # the signal handler, leaving asyncio tracebacks; stop the way Ctrl-C does instead.
            self.stop_soon()

    name = name or deployment_name(store)
    parameters: dict[str, Any] = {"roots": roots, "db": str(store), "if_busy": "skip"}
    if overrides:
        parameters["overrides"] = overrides
    if evaluate:
        parameters["evaluate"] = evaluate
    runner = _Runner(name=name, pause_on_shutdown=False)
    deployment_id = runner.add_flow(index_flow, name=name, cron=cron, parameters=parameters)
    if initial_run:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            # add_flow is sync_compatible, hence annotated UUID | Coroutine: called here, outside an
            # event loop, it returned the UUID
            client.create_flow_run_from_deployment(deployment_id, tags=[INITIAL_RUN_TAG])  # type: ignore[arg-type]
    if on_start is not None:
        on_start(name)

    async def main() -> None:
        runner.loop = asyncio.get_running_loop()
        runner.loop.add_signal_handler(signal.SIGINT, runner.stop_soon)
        await runner.start()  # installs handle_sigterm for SIGTERM itself

    with warm_flow_runs():
        asyncio.run(main())
