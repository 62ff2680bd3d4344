"""Remote API faults through the real flow and a real HTTP server (tests/fakeopenai.py): the run
completes after bounded retries, or fails with one clear line and the store as it was."""

from __future__ import annotations

import pytest
from fakeopenai import FakeOpenAI

import quarry

KEY = "sk-reliability-4242"
ATTEMPTS = 3


@pytest.fixture
def server(monkeypatch):
    with FakeOpenAI(dim=32, api_key=KEY) as srv:
        monkeypatch.setenv("QUARRY_EMBED_BACKEND", "openai")
        monkeypatch.setenv("QUARRY_OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("QUARRY_EMBED_MODEL", "fake-embed")
        monkeypatch.setenv("QUARRY_OPENAI_API_KEY", KEY)
        yield srv


def _tree(root, n=3, word="heron"):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"p{i}.md").write_text(f"# Page {i}\n\nNotes about the {word} number {i}, kept for tests.\n")
    return root


def _contents(db):
    with quarry.open(db) as idx:
        con = idx.snapshot.con
        chunks = sorted(con.execute("SELECT chunk_id, text_hash FROM chunks").fetchall())
        vecs = idx.snapshot.table.to_arrow()
        return chunks, sorted(zip(vecs.column("chunk_id").to_pylist(), vecs.column("text_hash").to_pylist()))


OVERRIDES = {"openai_attempts": ATTEMPTS, "openai_timeout": 1}

TRANSIENT = {
    "429-retry-after": lambda s: s.fail_next(2, status=429, retry_after="0.05", path="/v1/embeddings"),
    "500": lambda s: s.fail_next(1, status=500, path="/v1/embeddings"),
    "503": lambda s: s.fail_next(2, status=503, path="/v1/embeddings"),
    "hang-past-timeout": lambda s: s.delay_next(1, 5.0),
    "dropped-connection": lambda s: s.drop_next(1),
    "malformed-json": lambda s: s.malformed_next(1),
    "slow-drip": lambda s: s.drip_next(1, 0.05),
}


@pytest.mark.parametrize("fault", sorted(TRANSIENT))
def test_transient_faults_are_retried_and_the_run_completes(tmp_path, run_flow, server, fault):
    tree = _tree(tmp_path / "tree")
    server.reset()
    TRANSIENT[fault](server)
    report = run_flow([tree], tmp_path / "db", overrides=OVERRIDES)
    assert report["failed"] == 0 and report["embedded_chunks"] == report["chunks"] == 3
    # bounded: the dimension probe plus at most ATTEMPTS tries of the one batch
    assert len(server.calls_to("/v1/embeddings")) <= ATTEMPTS + 1
    with quarry.open(tmp_path / "db") as idx:
        assert idx.search("heron number", k=3, mode="vector").results


PERMANENT = {
    "wrong-count": ("wrong_count", 1, "vectors for"),
    "too-few": ("wrong_count", -1, ""),  # the one-input dimension probe gets no vector at all
    "wrong-dimension": ("wrong_dim", 16, "16-d vectors, expected 32"),
    "malformed-always": (None, None, ""),
}


@pytest.mark.parametrize("fault", sorted(PERMANENT))
def test_permanent_faults_fail_cleanly_and_store_nothing(tmp_path, run_flow, server, fault):
    tree = _tree(tmp_path / "tree")
    db = tmp_path / "db"
    run_flow([tree], db, overrides=OVERRIDES)
    before = _contents(db)
    (tree / "new.md").write_text("# New\n\nA page about the egret, added later.\n")
    server.reset()
    attr, value, message = PERMANENT[fault]
    if attr:
        setattr(server, attr, value)
    else:
        server.malformed_next(100)
    with pytest.raises(Exception) as info:
        run_flow([tree], db, overrides=OVERRIDES)
    assert message in str(info.value) and "\n" not in str(info.value).strip()
    assert KEY not in str(info.value)
    assert len(server.calls_to("/v1/embeddings")) <= ATTEMPTS * 4  # provider retries x Prefect task retries
    assert _contents(db) == before  # nothing invalid stored, the previous index intact
