"""The openai embedding backend through the real flow, against tests/fakeopenai.py."""

from __future__ import annotations

import shutil

import pytest
from conftest import SAMPLE
from fakeopenai import FakeOpenAI

import quarry
from quarry.core.settings import Settings

KEY = "sk-test-do-not-leak-7788"


@pytest.fixture
def server(monkeypatch):
    with FakeOpenAI(dim=64, api_key=KEY) as srv:
        monkeypatch.setenv("QUARRY_EMBED_BACKEND", "openai")
        monkeypatch.setenv("QUARRY_OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("QUARRY_EMBED_MODEL", "fake-embed")
        monkeypatch.setenv("QUARRY_OPENAI_API_KEY", KEY)
        yield srv


def test_index_and_search_through_the_provider(tmp_path, run_flow, server):
    tree = tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    server.fail_next(1, status=503, path="/v1/embeddings")
    report = run_flow([tree], tmp_path / "db", overrides={"embed_dim": 32, "openai_attempts": 3})
    assert report["failed"] == 0 and report["embedded_chunks"] == report["chunks"] > 0
    assert all(r.json.get("dimensions") == 32 for r in server.requests if r.path.endswith("/embeddings"))
    with quarry.open(tmp_path / "db", Settings.from_env(embed_dim=32)) as idx:
        assert idx.status()["dim"] == 32
        assert idx.search("postmortem checkout outage", k=3).results
    stored = b"".join(p.read_bytes() for p in (tmp_path / "db").rglob("*") if p.is_file())
    assert KEY.encode() not in stored

    calls = server.calls
    again = run_flow([tree], tmp_path / "db", full=True, overrides={"embed_dim": 32})
    assert again["embedded_chunks"] == 0 and server.calls == calls  # every vector reused by text hash


def test_a_rejected_key_fails_once_with_a_clear_error_and_keeps_the_store(tmp_path, run_flow, server, monkeypatch):
    tree = tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    run_flow([tree], tmp_path / "db")
    before = quarry.open(tmp_path / "db").status()["chunks"]
    (tree / "new.md").write_text("# New\n\nA new page about rotating credentials.\n")
    monkeypatch.setenv("QUARRY_OPENAI_API_KEY", "sk-wrong-key-1234")
    server.reset()
    with pytest.raises(Exception) as info:
        run_flow([tree], tmp_path / "db")
    message = str(info.value)
    assert "401" in message and "sk-wrong-key-1234" not in message and KEY not in message
    assert len(server.calls_to("/v1/embeddings")) == 1  # neither the provider nor Prefect retried a 401
    assert quarry.open(tmp_path / "db").status()["chunks"] == before
