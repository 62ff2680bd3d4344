"""Running the index flow from the CLI: a private Prefect API server tied to this process.

Without ``PREFECT_API_URL`` Prefect would start a temporary server that outlives a killed
parent and prints tracebacks at exit. quarry instead starts the same server itself, in a
child that exits when its parent dies (even by SIGKILL), with its output in the store's
``logs/`` folder. Importing this module imports Prefect; the query path never does.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from quarry.errors import QuarryError

STARTUP_TIMEOUT = float(os.environ.get("QUARRY_PREFECT_STARTUP_TIMEOUT", "120"))


def prefect_environment() -> None:
    """Settings that keep Prefect quiet and offline; the user's explicit values win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # quarry prints its own one-line errors and summaries; Prefect's console output would
    # repeat them with tracebacks. Task retries still reach the Prefect API's run logs.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_UI_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _flush_prefect_logs() -> None:
    """Send buffered run logs while the server still listens (else Prefect prints errors at exit)."""
    if "prefect.logging.handlers" not in sys.modules:
        return
    try:
        from prefect.logging.handlers import APILogHandler

        APILogHandler.flush()
    except Exception:  # logs are a convenience; never fail a run over them
        pass


@contextlib.contextmanager
def prefect_api(log_dir: Path):
    """Yield with ``PREFECT_API_URL`` pointing at a reachable Prefect API.

    Uses the user's server when ``PREFECT_API_URL`` is set; otherwise starts a private one.
    """
    prefect_environment()
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    import httpx

    log_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = open(log_dir / "prefect-server.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "quarry._prefect_server", str(port), str(os.getpid())],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C goes to quarry, which then stops the server cleanly
    )
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + STARTUP_TIMEOUT
    try:
        while True:
            if proc.poll() is not None:
                raise QuarryError(f"the Prefect server failed to start; see {log_dir / 'prefect-server.log'}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise QuarryError(f"the Prefect server did not start within {STARTUP_TIMEOUT:.0f} s")
            time.sleep(0.2)
        os.environ["PREFECT_API_URL"] = url
        yield url
    finally:
        _flush_prefect_logs()
        os.environ.pop("PREFECT_API_URL", None)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
