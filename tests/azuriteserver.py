"""Azurite, the Azure Storage emulator, on a free 127.0.0.1 port, for tests of az:// stores.

Azurite comes from npm, pinned in ``tests/azurite/package-lock.json`` and installed by ``make
azurite`` (a prerequisite of ``make test``); a checkout where it is missing installs it on first use
when node and npm are there, and the az:// tests are skipped, saying why, when they are not. The
server holds everything in memory and stops with the fixture. It serves an account of its own,
``quarrytest``, whose made-up key the tests check never reaches any output.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from localserver import free_port, local_server

AZURITE = Path(__file__).resolve().parent / "azurite"
ACCOUNT = "quarrytest"
SECRET = base64.b64encode(b"quarry-test-secret-not-for-output").decode()  # Azure keys are base64


def azurite_bin() -> Path:
    """The ``azurite-blob`` executable, installed with ``npm ci`` if needed; skips without node/npm."""
    exe = AZURITE / "node_modules" / ".bin" / "azurite-blob"
    if exe.is_file():
        return exe
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"az:// tests need Azurite, which needs {' and '.join(missing)} (not found on PATH)")
    done = subprocess.run(["npm", "ci", "--loglevel=error"], cwd=AZURITE, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not exe.is_file():
        raise RuntimeError(f"`npm ci` in {AZURITE} failed (run `make azurite`):\n{done.stderr[-2000:]}")
    return exe


@contextmanager
def azurite_server(timeout: float = 60):
    """Start the blob service; yields ``(endpoint, env)`` where ``env`` holds the AZURE_* variables."""
    exe = azurite_bin()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with (
        tempfile.TemporaryDirectory(prefix="quarry-azurite-") as work,
        local_server(
            [
                str(exe),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--inMemoryPersistence",
                "--silent",
                "--disableTelemetry",
                "--skipApiVersionCheck",
            ],
            lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close(),
            f"Azurite on {endpoint}",
            timeout,
            cwd=work,
            env={**os.environ, "AZURITE_ACCOUNTS": f"{ACCOUNT}:{SECRET}"},
        ),
    ):
        env = {
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURITE_BLOB_STORAGE_URL": endpoint,
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": SECRET,
        }
        yield endpoint, env


def connection_env(endpoint: str) -> dict:
    """The same account as one ``AZURE_STORAGE_CONNECTION_STRING`` (what the portal hands out)."""
    return {
        "AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
        f"AccountKey={SECRET};BlobEndpoint={endpoint}/{ACCOUNT};"
    }


def new_container(endpoint: str) -> str:
    """Create a container with a fresh name in the test account; returns the name."""
    from azure.storage.blob import BlobServiceClient

    name = f"quarry-{uuid.uuid4().hex[:12]}"
    service = BlobServiceClient(f"{endpoint}/{ACCOUNT}", credential={"account_name": ACCOUNT, "account_key": SECRET})
    service.create_container(name)
    return name
