"""The real default model end to end (slow: loads all-MiniLM-L6-v2)."""

from __future__ import annotations

import shutil

import pytest

import quarry
from conftest import SAMPLE
from quarry.settings import Settings

pytestmark = pytest.mark.slow


def test_default_model_indexes_and_finds_by_meaning(tmp_path, run_flow, monkeypatch):
    monkeypatch.delenv("QUARRY_EMBED_BACKEND", raising=False)
    from quarry.embedders import describe

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
