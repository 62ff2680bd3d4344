"""Shared fixtures: one real Prefect API server for the session, real stores in tmp dirs.

Tests use the dependency-free ``hash`` embedder unless marked ``slow`` (real model).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLE = ROOT / "data" / "sample"

# Before anything imports Prefect: an isolated Prefect home and quiet, offline settings.
_home = tempfile.mkdtemp(prefix="quarry-test-prefect-")
os.environ["PREFECT_HOME"] = _home
os.environ.setdefault("QUARRY_EMBED_BACKEND", "hash")
# no detached full-text builder after every test commit (2 cores); tests/test_duckdb_fts.py turns it on
os.environ.setdefault("QUARRY_DUCKDB_FTS", "0")
# no private Prefect server stays after a test's run, even when the suite runs at a terminal
os.environ.setdefault("QUARRY_PREFECT_LINGER", "0")
from quarry.flows.orchestration import prefect_environment  # noqa: E402

prefect_environment()


def pytest_unconfigure(config):
    """The session's Prefect home (its history database, tens of MB) goes with the session."""
    import shutil

    shutil.rmtree(_home, ignore_errors=True)


def shared(*parts: str) -> Path:
    """A path under ../shared/data, skipping the test when the folder is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    return path


@pytest.fixture(scope="session")
def prefect_api():
    """A real Prefect API server for the whole session (subprocess CLIs reuse it)."""
    from quarry.flows.orchestration import prefect_api as api

    with api(Path(_home) / "logs") as url:
        yield url


@pytest.fixture
def run_flow(prefect_api):
    """Run the real index flow in-process: run_flow(roots, db, **kwargs) -> report."""
    from quarry.flows.index import index_flow

    def run(roots, db, **kwargs):
        return index_flow([str(r) for r in roots], db=str(db), **kwargs)

    return run


@pytest.fixture
def cli(prefect_api):
    """Run the real ``quarry`` CLI in a subprocess: cli(*args, env=None) -> CompletedProcess."""

    def run(*args, env=None, timeout=300):
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "quarry.cli.main", *map(str, args)],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            cwd=ROOT,
        )

    return run


def _torch_missing() -> str | None:
    """Why the torch-marked tests cannot run here, or None when torch and sentence-transformers import."""
    import importlib.util

    missing = [m for m in ("torch", "sentence_transformers") if importlib.util.find_spec(m) is None]
    return f"{' and '.join(missing)} not installed" if missing else None


def pytest_collection_modifyitems(config, items):
    """``torch`` tests need quarry[torch], which .venv (what a user gets) does not have.

    They run from .venv-torch (``make test-torch``); elsewhere they skip, unless
    ``QUARRY_REQUIRE_TORCH=1`` (set by ``make test-torch``) turns the skip into a failure.
    """
    why = _torch_missing()
    if why is None:
        return
    marked = [item for item in items if item.get_closest_marker("torch") is not None]
    if marked and os.environ.get("QUARRY_REQUIRE_TORCH") == "1":
        pytest.exit(f"QUARRY_REQUIRE_TORCH=1 but {why} in {sys.prefix}", returncode=1)
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=f"needs quarry[torch]: {why} (make test-torch runs it)"))


# --- object-storage emulators, one per test module --------------------------------------------


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server, with the AWS_* environment pointing at it; yields its endpoint."""
    from s3server import aws_env, moto_server

    with moto_server() as (endpoint, env), aws_env(env):
        yield endpoint


@pytest.fixture(scope="module")
def gcs():
    """A GCS emulator (tests/gcsserver.py), with STORAGE_EMULATOR_HOST pointing at it."""
    from gcsserver import gcs_emulator
    from s3server import aws_env

    with gcs_emulator() as emulator, aws_env(emulator.env):
        yield emulator


# --- LibreOffice, for legacy DOC and PPT ------------------------------------------------------


@pytest.fixture(scope="session")
def soffice():
    """The LibreOffice program; the test is skipped, saying why, where it is not installed, except
    under CI=true, where `make test` installs it (`make office`) and a skip would hide a failure."""
    from quarry.ingest.parsers.legacy import soffice as find

    program = find()
    if program is None:
        why = "LibreOffice (soffice) is not installed: `make office` installs it (Debian, as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    return program


@pytest.fixture(scope="session")
def legacy_files(soffice, tmp_path_factory):
    """DOC and PPT files written by LibreOffice itself from the shared DOCX, ODT and PPTX samples:
    {name: path} for simple.doc, docx-tables.doc and fake-power-point-table.ppt."""
    out = tmp_path_factory.mktemp("legacy")
    sources = {
        "doc": [shared("formats", "simple.odt"), shared("formats", "docx-tables.docx")],
        "ppt": [shared("formats", "fake-power-point-table.pptx")],
    }
    for target, files in sources.items():
        subprocess.run(
            [
                soffice,
                "--headless",
                "--norestore",
                f"-env:UserInstallation={(out / 'profile').as_uri()}",
                "--convert-to",
                target,
                "--outdir",
                str(out),
                *map(str, files),
            ],
            check=True,
            capture_output=True,
            timeout=300,
            env={**os.environ, "HOME": str(out)},
        )
    made = {p.name: p for p in out.iterdir() if p.suffix in (".doc", ".ppt")}
    assert set(made) == {"simple.doc", "docx-tables.doc", "fake-power-point-table.ppt"}, made
    return made


def bench_module(name: str):
    """The bench script ``bench/<name>.py`` as a module, imported as ``python bench/<name>.py`` runs
    it: with bench/ on ``sys.path``, where its shared module (bench/common.py) and siblings are."""
    import importlib.util
    import sys

    folder = str(ROOT / "bench")
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
