"""moto's S3 server on a free 127.0.0.1 port, for tests of stores on object storage.

``python -m moto.server`` from the project's venv (moto 5.2.5 answers a failed conditional put
with 412). The server holds everything in memory and is stopped when the fixture ends. Its
check-and-write holds no lock, so conflict paths are tested one at a time.
"""

from __future__ import annotations

import os
import sys
import urllib.request
import uuid
from contextlib import contextmanager

from localserver import free_port, local_server

KEY = "quarry-test-key-id"  # fake credentials: tests check that they never reach any output
SECRET = "quarry-test-secret-not-for-output"


@contextmanager
def moto_server(timeout: float = 30, log: str | None = None, server_env: dict | None = None):
    """Start the server; yields ``(endpoint, env)`` where ``env`` holds the AWS_* variables.

    ``log``: a file that receives the server's request log (one line per request: the tests and
    ``bench/sources.py`` count object downloads in it); ``server_env``: variables for the server process
    (``INITIAL_NO_AUTH_ACTION_COUNT`` turns on moto's IAM checks after that many requests)."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    out = open(log, "ab") if log else None
    popen = {"stdout": out, "stderr": out} if out else {}
    if server_env:
        popen["env"] = {**os.environ, **server_env}
    try:
        with local_server(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            lambda: urllib.request.urlopen(endpoint, timeout=1).close(),
            f"moto's server on {endpoint}",
            timeout,
            **popen,
        ):
            env = {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ALLOW_HTTP": "true",
                "AWS_EC2_METADATA_DISABLED": "true",
            }
            yield endpoint, env
    finally:
        if out is not None:
            out.close()


def new_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name; returns the name."""
    name = f"quarry-{uuid.uuid4().hex[:12]}"
    req = urllib.request.Request(f"{endpoint}/{name}", method="PUT")
    urllib.request.urlopen(req, timeout=10).close()
    return name


@contextmanager
def aws_env(env: dict):
    """Set the AWS_* variables in this process for the block."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
