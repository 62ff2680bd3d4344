"""A server process on a free 127.0.0.1 port for the tests: started, awaited, stopped.

Used by the object-storage emulators (moto's S3 server, Azurite, a GCS emulator): each names its
command and how to tell it is up; this module owns the port, the wait and the shutdown.
"""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_server(cmd: list[str], ready, name: str, timeout: float = 60, **popen):
    """Run ``cmd`` until the block ends; ``ready()`` returns once it answers and raises OSError before."""
    popen = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, **popen}
    proc = subprocess.Popen(cmd, **popen)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                ready()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start ({' '.join(map(str, cmd))})") from None
                time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
