"""The real default model end to end (slow: loads all-MiniLM-L6-v2)."""

from __future__ import annotations

import shutil

import pytest
from conftest import SAMPLE

import quarry
from quarry.core.settings import Settings

pytestmark = pytest.mark.slow


def test_default_model_indexes_and_finds_by_meaning(tmp_path, run_flow, monkeypatch):
    monkeypatch.delenv("QUARRY_EMBED_BACKEND", raising=False)
    from quarry.ingest.embedders import describe

    settings = Settings.from_env()
    assert describe(settings) == ("all-MiniLM-L6-v2", 384)
    tree = tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    report = run_flow([tree], tmp_path / "db")
    assert report["failed"] == 0 and report["truncated"] == 0
    with quarry.open(tmp_path / "db", settings) as idx:
        # No word of the query appears in the target section: only the vectors can find it.
        hits = idx.search("undo a broken release", k=3, mode="vector").results
        assert hits[0].path.endswith("deploys.md")
        assert 0.2 < hits[0].scores["vector"] <= 1.0
        assert idx.status()["model"] == "all-MiniLM-L6-v2"


def test_search_with_the_default_backend_never_imports_torch(tmp_path, run_flow, monkeypatch):
    """The default backend is ONNX int8: a search process must not pay torch's import."""
    import subprocess
    import sys

    monkeypatch.delenv("QUARRY_EMBED_BACKEND", raising=False)
    assert Settings.from_env().embed_backend == "onnx-int8"
    tree = tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    run_flow([tree], tmp_path / "db")
    probe = (
        "import sys, quarry\n"
        f"hits = quarry.open({str(tmp_path / 'db')!r}).search('undo a broken release', k=3).results\n"
        "assert hits, 'no results'\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "QUARRY_EMBED_BACKEND"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
