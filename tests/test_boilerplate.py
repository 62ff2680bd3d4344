"""Boilerplate flagged per chunk (``chunks.boilerplate``), kept true by each commit, exported and
filtered; and ``QUARRY_BOILERPLATE=strip``, which keeps those lines out of the BM25 text and the
embedded text while the stored text stays whole."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_dedup import DISCLAIMER, write

import quarry
from quarry.retrieval.corpus import boilerplate as rules

TOPICS = {
    "deploy": "Ship your starter change to production following the deploy runbook with your buddy watching.",
    "expenses": "Submit receipts within thirty days through the finance portal; hotels follow the travel table.",
    "oncall": "Shadow one on-call shift in week three, reading each incident write-up with the person paged.",
    "laptops": "Laptops are replaced every three years; order a new one from the hardware catalogue page.",
    "holidays": "Holiday requests go through the people portal and your manager approves them within a week.",
}
DISCLAIMER_TOKENS = {"internal", "forward", "company", "approval", "legal"}  # in no topic, header or title


def page(topic: str, disclaimer: bool) -> str:
    return f"# {topic.title()}\n\n{TOPICS[topic]}\n" + (f"\n{DISCLAIMER}\n" if disclaimer else "")


def flags(db) -> dict[str, float | None]:
    """rel_path -> the largest boilerplate share among its chunks."""
    with quarry.open(db) as index:
        rows = index.sql(
            "SELECT d.rel_path, max(c.boilerplate) AS b FROM chunks c JOIN documents d USING (doc_id) "
            "GROUP BY d.rel_path"
        ).records()
    return {r["rel_path"]: r["b"] for r in rows}


def chunks(db) -> list[dict]:
    with quarry.open(db) as index:
        return index.sql(
            "SELECT d.rel_path, c.chunk_id, c.header, c.text, c.search_text, c.text_hash, c.boilerplate "
            "FROM chunks c JOIN documents d USING (doc_id) ORDER BY c.chunk_id"
        ).records()


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    for topic in ("deploy", "expenses", "oncall"):
        write(root / f"{topic}.md", page(topic, True))
    write(root / "laptops.md", page("laptops", False))
    return root


def test_rules():
    assert [rules.threshold(n) for n in (1, 4, 150, 151, 1000)] == [3, 3, 3, 4, 20]
    assert rules.share([1, 2, 3, 4], {2, 4}) == 0.5 and rules.share(None, {1}) == 0.0
    text = f"Our own words here.\n{DISCLAIMER.upper()}\nMore of our own words."
    from quarry.retrieval.corpus.minhash import line_hashes

    assert rules.strip_lines(text, set(line_hashes(DISCLAIMER))) == "Our own words here.\nMore of our own words."


def test_flags_on_a_tree_with_a_shared_disclaimer(tree, tmp_path, run_flow):
    run_flow([tree], tmp_path / "db")
    got = flags(tmp_path / "db")
    # the disclaimer is one of two lines of 20+ characters in each of three pages: half of them
    assert got == {"deploy.md": 0.5, "expenses.md": 0.5, "oncall.md": 0.5, "laptops.md": 0.0}
    with quarry.open(tmp_path / "db") as index:  # keep (the default): the BM25 text is whole
        texts = [r["search_text"] for r in index.sql("SELECT search_text FROM chunks").records()]
    assert sum(DISCLAIMER_TOKENS <= set(t.split()) for t in texts) == 3


def test_flags_follow_incremental_runs(tmp_path, run_flow):
    root, db = tmp_path / "tree", tmp_path / "db"
    write(root / "deploy.md", page("deploy", True))
    write(root / "expenses.md", page("expenses", True))
    write(root / "laptops.md", page("laptops", False))
    run_flow([root], db)
    assert set(flags(db).values()) == {0.0}  # two documents hold the line: not boilerplate yet
    write(root / "oncall.md", page("oncall", True))  # a third: the line crosses the threshold
    run_flow([root], db)
    assert flags(db) == {"deploy.md": 0.5, "expenses.md": 0.5, "oncall.md": 0.5, "laptops.md": 0.0}
    write(root / "holidays.md", page("holidays", False))  # a change elsewhere keeps them
    run_flow([root], db)
    assert flags(db)["deploy.md"] == 0.5 and flags(db)["holidays.md"] == 0.0
    (root / "expenses.md").unlink()  # two again: it falls back
    run_flow([root], db)
    assert flags(db) == {"deploy.md": 0.0, "oncall.md": 0.0, "laptops.md": 0.0, "holidays.md": 0.0}
    write(root / "expenses.md", page("expenses", False) + "\n" + DISCLAIMER + "\n")  # back, edited
    run_flow([root], db)
    assert flags(db)["deploy.md"] == 0.5 and flags(db)["expenses.md"] == 0.5
    # every incremental answer equals a count from scratch (quarry maintain's)
    with quarry.open(db) as index:
        from quarry.store import boilerplate

        assert not boilerplate.stale(index.snapshot.con)


def test_a_mode_switch_recounts_every_chunk(tree, tmp_path, run_flow, monkeypatch):
    db = tmp_path / "db"
    run_flow([tree], db)
    from quarry.store import maintain
    from quarry.store.handle import open_store

    assert maintain.merge(open_store(str(db)))["boilerplate_recounted"] is False  # flags agree with a count
    monkeypatch.setenv("QUARRY_BOILERPLATE", "strip")
    # quarry maintain recounts, but has no model to embed stripped texts with: flags only
    out = maintain.merge(open_store(str(db)))
    assert out["boilerplate_recounted"] is True and out["merged"] is True
    _check_stripped(db, set())
    write(tree / "holidays.md", page("holidays", False))  # the next index run strips every chunk
    run_flow([tree], db)
    _check_stripped(db, {"deploy.md", "expenses.md", "oncall.md"})
    monkeypatch.setenv("QUARRY_BOILERPLATE", "keep")  # and back: the lines return at the next run
    write(tree / "laptops.md", page("laptops", False) + "\nOne more line about laptops and docks.\n")
    run_flow([tree], db)
    _check_stripped(db, set())


def test_export_where_boilerplate(tree, tmp_path, run_flow, cli):
    run_flow([tree], tmp_path / "db")
    done = cli("export", tmp_path / "out", "--db", tmp_path / "db", "--where", "boilerplate < 0.5", "--json")
    assert done.returncode == 0, done.stderr
    table = pq.read_table(tmp_path / "out" / "chunks.parquet")
    assert set(table.column("boilerplate").to_pylist()) == {0.0}
    assert all(DISCLAIMER not in t for t in table.column("text").to_pylist())
    assert json.loads(done.stdout)["rows"]["chunks"] == table.num_rows >= 1
    done = cli(
        "sql", "SELECT count(*) AS n FROM chunks WHERE boilerplate >= 0.5", "--db", tmp_path / "db", "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["n"] == 3


def _embedded(db, chunk_ids: list[str]) -> dict[str, np.ndarray]:
    with quarry.open(db) as index:
        table = index.snapshot.table
        rows = (
            table.search()
            .where("chunk_id IN ({})".format(", ".join(f"'{c}'" for c in chunk_ids)))
            .limit(100)
            .to_arrow()
        )
    return {
        c: np.asarray(v, dtype=np.float32)
        for c, v in zip(rows.column("chunk_id").to_pylist(), rows.column("vector").to_pylist())
    }


def _check_stripped(db, stripped: set[str]):
    """Chunks of ``stripped`` (rel_paths) lack the disclaimer in their BM25 and embedded texts and
    keep it in their text; their vectors are the embedder's of the stripped text."""
    from quarry.core.settings import Settings
    from quarry.ingest.embedders import get_embedder

    embedder = get_embedder(Settings(embed_backend="hash"))
    got = [c for c in chunks(db) if DISCLAIMER in c["text"]]
    assert {c["rel_path"] for c in got} == stripped | {c["rel_path"] for c in got}
    vectors = _embedded(db, [c["chunk_id"] for c in got])
    for c in got:
        want = c["rel_path"] in stripped
        assert (not DISCLAIMER_TOKENS & set(c["search_text"].split())) is want, c["rel_path"]
        embedded = (
            rules.embed_text(c["header"], c["text"].replace(f"\n{DISCLAIMER}", ""))
            if want
            else rules.embed_text(c["header"], c["text"])
        )
        assert c["text_hash"] == hashlib.sha256(embedded.encode()).hexdigest(), c["rel_path"]
        vec = embedder.embed([embedded])[0]
        assert np.allclose(vectors[c["chunk_id"]], vec / np.linalg.norm(vec), atol=1e-5) or np.allclose(
            vectors[c["chunk_id"]], vec, atol=1e-5
        )


def test_strip_keeps_the_lines_out_of_bm25_and_embeddings(tree, tmp_path, run_flow, monkeypatch):
    monkeypatch.setenv("QUARRY_BOILERPLATE", "strip")
    db = tmp_path / "db"
    run_flow([tree], db)  # one run of a fresh tree: the lines are learned and stripped by it
    _check_stripped(db, {"deploy.md", "expenses.md", "oncall.md"})
    with quarry.open(db) as index:
        hits = index.search("internal forward outside company approval legal", k=10, mode="bm25", collapse=False)
        assert not [h for h in hits.results if DISCLAIMER in h.text]
        hits = index.search("finance portal receipts", k=3, mode="bm25", collapse=False)
        assert hits.results and hits.results[0].path.endswith("expenses.md")
        assert DISCLAIMER in hits.results[0].text  # the stored text stays whole


def test_strip_brings_earlier_documents_in_line(tmp_path, run_flow, monkeypatch):
    monkeypatch.setenv("QUARRY_BOILERPLATE", "strip")
    root, db = tmp_path / "tree", tmp_path / "db"
    write(root / "deploy.md", page("deploy", True))
    write(root / "expenses.md", page("expenses", True))
    write(root / "laptops.md", page("laptops", False))
    run_flow([root], db)
    _check_stripped(db, set())  # two documents: not boilerplate, nothing stripped
    write(root / "oncall.md", page("oncall", True))
    report = run_flow([root], db)
    assert report["added"] == 1 and report["skipped"] == 3  # the earlier ones were not parsed again...
    _check_stripped(db, {"deploy.md", "expenses.md", "oncall.md"})  # ...yet stripped by the same run
    (root / "expenses.md").unlink()
    run_flow([root], db)
    _check_stripped(db, set())  # and given their lines back when it falls back


def test_a_move_across_roots_moves_the_count(tmp_path, run_flow):
    a, b, db = tmp_path / "a", tmp_path / "b", tmp_path / "db"
    for topic in ("deploy", "expenses", "oncall"):
        write(a / f"{topic}.md", page(topic, True))
    for topic in ("laptops", "holidays"):
        write(b / f"{topic}.md", page(topic, True))
    run_flow([a, b], db)
    assert flags(db) == {
        "deploy.md": 0.5,
        "expenses.md": 0.5,
        "oncall.md": 0.5,
        "laptops.md": 0.0,
        "holidays.md": 0.0,
    }  # counted per root: two in b
    (a / "oncall.md").rename(b / "oncall.md")  # the same bytes: a move, nothing parsed again
    report = run_flow([a, b], db)
    assert report["moved"] == 1 and report["embedded_chunks"] == 0
    assert flags(db) == {"deploy.md": 0.0, "expenses.md": 0.0, "oncall.md": 0.5, "laptops.md": 0.5, "holidays.md": 0.5}
