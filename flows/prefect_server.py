"""``python -m quarry.flows.prefect_server PORT PARENT_PID [--services] [--linger SECONDS ANNOUNCE]``:
Prefect's API server, for one parent.

A watchdog thread ends the server as soon as the parent process is gone, so a killed
``quarry index`` or ``quarry serve`` never leaves a server behind. With ``--linger`` (an
interactive ``quarry index``: :func:`quarry.flows.orchestration.prefect_api`), it stays after its
parent for the next run of the same store, which finds it through ``ANNOUNCE``
(``<store>/prefect/server.json``), and ends once no run has used it for ``SECONDS``. A run that
uses it holds a lease, a file named by its process id in ``leases/`` beside ``ANNOUNCE``; the
server counts a lease whose process lives as a run in progress.

Without ``--services`` the server runs in Prefect's ephemeral mode: the API only, no background
services, which is all a one-shot ``quarry index`` needs and the fastest to start. With
``--services`` it runs the background services ``prefect server start`` runs (the scheduler that
turns a deployment's schedule into flow runs, late-run marking, cancellation clean-up, …):
``quarry serve`` needs them, and Prefect runs none of them in ephemeral mode.

Why a wrapper of our own rather than Prefect's temporary server or ``prefect server start``:
Prefect's temporary server (what a flow starts when no API URL is set) outlives a parent killed
by SIGKILL and prints tracebacks at exit, and ``prefect server start`` serves the UI and every
service with nothing tying its life to ours (docs/ARCHITECTURE.md, *Orchestration*; the
kill -9 tests in tests/reliability and tests/test_schedule.py hold this). What is hand-written
is only the watchdog and the choice of mode; the server itself is Prefect's app under uvicorn.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path


def _watch(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leased(leases: Path) -> bool:
    """Whether a run holds a lease (a file named by a living process id); stale leases go."""
    held = False
    try:
        names = os.listdir(leases)
    except OSError:
        return False
    for name in names:
        if name.isdigit() and _alive(int(name)):
            held = True
        else:
            with contextlib.suppress(OSError):
                os.unlink(leases / name)
    return held


def _linger(parent: int, seconds: float, announce: Path) -> None:
    """End the server once its parent is gone and no run has held a lease for ``seconds``, or
    when the store is gone. Before ending, it withdraws its announcement and looks at the leases
    once more: a run takes its lease before it reads the announcement, so a run that read it is
    seen here and the server stays."""
    leases = announce.parent / "leases"
    used = time.monotonic()
    while True:
        time.sleep(1.0)
        if not announce.parent.is_dir():
            os._exit(0)
        if os.getppid() == parent or _leased(leases):
            used = time.monotonic()
            continue
        if time.monotonic() - used < seconds:
            continue
        text = None
        with contextlib.suppress(OSError):
            text = announce.read_text(encoding="utf-8")
            if f'"pid": {os.getpid()}' in text:
                os.unlink(announce)
            else:
                text = None
        if _leased(leases):  # a run read the announcement before it went: stay, announced again
            if text is not None:
                with contextlib.suppress(OSError):
                    announce.write_text(text, encoding="utf-8")
            used = time.monotonic()
            continue
        os._exit(0)


def create_app():
    """Prefect's API app; with ``--metrics STORE SECONDS``, also ``/metrics``: the store's run
    metrics (:mod:`quarry.core.metrics`), read at each scrape, its schedule's interval given."""
    from prefect.server.api.server import create_app as prefect_app

    app = prefect_app()
    if "--metrics" in sys.argv:
        from prometheus_client import make_asgi_app

        from quarry.core.metrics import run_registry
        from quarry.store.metrics import run_facts

        at = sys.argv.index("--metrics")
        store, seconds = sys.argv[at + 1], float(sys.argv[at + 2])
        from starlette.routing import Route

        metrics = make_asgi_app(run_registry(lambda: run_facts(store, schedule_seconds=seconds)))

        class Metrics:  # a class instance: Starlette hands it the raw ASGI call
            async def __call__(self, scope, receive, send):
                await metrics(scope, receive, send)

        app.router.routes.insert(0, Route("/metrics", Metrics()))  # before Prefect's catch-all mount at ""
    return app


def main() -> None:
    port, parent = int(sys.argv[1]), int(sys.argv[2])
    services = "--services" in sys.argv[3:]
    watch: Callable[..., None]
    args: tuple[object, ...]
    if "--linger" in sys.argv:
        at = sys.argv.index("--linger")
        watch, args = _linger, (parent, float(sys.argv[at + 1]), Path(sys.argv[at + 2]))
    else:
        watch, args = _watch, (parent,)
    threading.Thread(target=watch, args=args, daemon=True).start()
    os.environ["PREFECT_UI_ENABLED"] = "0"
    if services:
        os.environ.pop("PREFECT__SERVER_EPHEMERAL", None)
    else:
        os.environ["PREFECT__SERVER_EPHEMERAL"] = "1"
    # Prefect's server modules make ~600,000 objects and none of them is garbage: Python's collector
    # would walk them all at each full collection while they import (~15% of the import's CPU).
    # Paused while they import, then frozen out of its way for the server's life (as flows/warm.py).
    gc.disable()
    import prefect.server.api.server  # noqa: F401  (imported here, with the collector paused)
    import uvicorn

    gc.freeze()
    gc.enable()
    uvicorn.run(
        create_app,
        factory=True,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="on",
    )


if __name__ == "__main__":
    main()
