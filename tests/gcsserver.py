"""A Google Cloud Storage emulator on a free 127.0.0.1 port, for tests of ``gs://`` stores.

Two emulators, neither of them Google Cloud Storage itself:

- **gcp-storage-emulator** (PyPI, in the ``test`` extra; ``python -m gcp_storage_emulator start
  --in-memory``). It serves the JSON API that google-cloud-storage speaks, with generations,
  listing by prefix, deletes, simple and resumable uploads, but it **ignores preconditions**:
  ``ifGenerationMatch`` is accepted and not checked, so every conditional write wins. Tests of
  conditional writes skip on it (:func:`conditional`).
- **storage-testbench**, Google's own fake of the GCS API for its client libraries, which checks
  ``ifGenerationMatch`` (412) on simple and resumable uploads. It is not on PyPI: install it
  from its repository into a virtual environment of its own and set ``QUARRY_GCS_TESTBENCH`` to
  that environment's Python; it is then preferred.

Neither serves the XML API's object listing (``GET /bucket?list-type=2``), which LanceDB's
object store uses: LanceDB tables cannot be written to either (the end-to-end store tests skip).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from localserver import free_port, local_server

PROJECT = "quarry-test"
NO_PRECONDITIONS = (
    "gcp-storage-emulator ignores ifGenerationMatch (every conditional write wins): set "
    "QUARRY_GCS_TESTBENCH to a Python with Google's storage-testbench to run this on gs://"
)
NO_LANCE = (
    "LanceDB's object store lists GCS objects through the XML API (GET /bucket?list-type=2), which no "
    "emulator installable here serves (gcp-storage-emulator: 501, storage-testbench: 404)"
)


@dataclass
class Emulator:
    name: str
    endpoint: str
    preconditions: bool  # whether ifGenerationMatch is checked

    @property
    def env(self) -> dict:
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "GOOGLE_CLOUD_PROJECT": PROJECT}


_running: list[Emulator] = []
_guard = threading.Lock()


def running() -> Emulator | None:
    """The emulator started last in this process (and still running), if any."""
    with _guard:
        return _running[-1] if _running else None


@contextmanager
def gcs_emulator(timeout: float = 60):
    """Start an emulator; yields an :class:`Emulator`. Skips the tests when the test extra is missing."""
    import pytest

    testbench = os.environ.get("QUARRY_GCS_TESTBENCH")
    for module in ["google.cloud.storage"] + ([] if testbench else ["gcp_storage_emulator"]):
        if not _installed(module):
            pytest.skip(f"{module} is not installed: pip install -e '.[test]'")
    port = free_port()
    if testbench:
        cmd = [
            testbench,
            "-m",
            "gunicorn",
            f"--bind=127.0.0.1:{port}",
            "--worker-class=sync",
            "--threads=16",
            "testbench:run()",
        ]
        emulator = Emulator("storage-testbench", f"http://127.0.0.1:{port}", preconditions=True)
    else:
        cmd = [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "-q",
        ]
        emulator = Emulator("gcp-storage-emulator", f"http://127.0.0.1:{port}", preconditions=False)
    with local_server(
        cmd,
        lambda: urllib.request.urlopen(emulator.endpoint, timeout=1).close(),
        f"{emulator.name} on {emulator.endpoint}",
        timeout,
    ):
        with _guard:
            _running.append(emulator)
        try:
            yield emulator
        finally:
            with _guard:
                _running.remove(emulator)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        return False


def new_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name through the JSON API; returns the name."""
    name = f"quarry-{uuid.uuid4().hex[:12]}"
    req = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={PROJECT}",
        method="POST",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).close()
    return name


def conditional(store) -> None:
    """Skip the calling test when ``store`` is on an emulator that does not check preconditions."""
    import pytest

    emulator = running()
    if store.url.scheme == "gs" and emulator is not None and not emulator.preconditions:
        pytest.skip(NO_PRECONDITIONS)
