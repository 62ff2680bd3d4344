"""A real ``quarry api`` process on a free 127.0.0.1 port for the tests (and its log)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
from localserver import free_port

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def api_server(db, *args: str, log: Path, env: dict | None = None, timeout: float = 90):
    """Run ``quarry api --db DB --port <free> ARGS`` until the block ends; yields (base URL, process)."""
    port = free_port()
    cmd = [sys.executable, "-m", "quarry.cli.main", "api", "--db", str(db), "--port", str(port), *args]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=ROOT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = Path(log).read_text(errors="replace")[-2000:]
                raise RuntimeError(f"quarry api did not start ({' '.join(cmd)}):\n{tail}")
            time.sleep(0.2)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
