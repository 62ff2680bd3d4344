"""The real Prefect index flow on real files: counts, incremental runs, failures."""

from __future__ import annotations

import shutil

import pytest
from conftest import SAMPLE, shared

import quarry
from quarry.store.pointer import read_pointer


@pytest.fixture
def tree(tmp_path):
    dest = tmp_path / "tree"
    shutil.copytree(SAMPLE, dest)
    return dest


def test_index_then_search(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    report = run_flow([tree], db)
    assert report["added"] == 5 and report["failed"] == 0 and report["chunks"] > 5
    assert report["embedded_chunks"] == report["chunks"] and report["model_calls"] >= 1
    with quarry.open(db) as idx:
        hits = idx.search("deployctl rollback", k=3).results
        assert hits[0].path.endswith("deploys.md")
        assert hits[0].section == "Rolling back a bad deploy"
        assert hits[0].header.startswith("Document: Deploying and rolling back services")
        assert hits[0].ranks["bm25"] == 1
        status = idx.status()
    assert status["documents"] == 5 and status["chunks"] == report["chunks"]


def test_unchanged_rerun_does_no_work(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    first = run_flow([tree], db)
    for path in tree.rglob("*.md"):
        path.touch()  # mtime changes, bytes do not
    generation = read_pointer(db).generation
    catalogs = sorted(p.name for p in db.glob("catalog-*"))
    second = run_flow([tree], db)
    # nothing to write: no new generation, no catalog copy; the run is journalled, then listed
    assert read_pointer(db).generation == generation and sorted(p.name for p in db.glob("catalog-*")) == catalogs
    with quarry.open(db) as idx:
        assert [r["run_id"] for r in idx.runs()] == [second["run_id"], first["run_id"]]
    assert second["skipped"] == 5 and second["embedded_chunks"] == 0 and second["model_calls"] == 0
    assert second["added"] == second["updated"] == second["deleted"] == 0
    assert second["chunks"] == 0
    with quarry.open(db) as idx:
        assert idx.status()["chunks"] == first["chunks"]


def test_edit_delete_rename(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db)
    deploys = tree / "runbooks" / "deploys.md"
    deploys.write_text(deploys.read_text() + "\nZanzibar marmalade protocol for quokka station.\n")
    (tree / "handbook" / "expenses.txt").unlink()
    (tree / "handbook" / "code-review.rst").rename(tree / "handbook" / "reviews.rst")
    report = run_flow([tree], db)
    assert (report["updated"], report["deleted"], report["moved"], report["added"]) == (1, 1, 1, 0)
    assert report["embedded_chunks"] == 1  # only the last chunk of deploys.md changed
    assert report["reused_vectors"] == report["chunks"] - 1
    with quarry.open(db) as idx:
        assert "quokka" in idx.search("quokka marmalade", k=1, mode="bm25").results[0].text
        paths = {r.path for r in idx.search("code review approval", k=20).results}
        assert any(p.endswith("reviews.rst") for p in paths)
        assert not any(p.endswith(("code-review.rst", "expenses.txt")) for p in paths)
        assert idx.status()["documents"] == 4


def test_deletes_are_scoped_to_the_roots(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree / "runbooks"], db)
    run_flow([tree / "handbook"], db)
    with quarry.open(db) as idx:
        assert idx.status()["documents"] == 5


def test_dry_run_changes_nothing(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db)
    pointer = read_pointer(db)
    (tree / "handbook" / "expenses.txt").unlink()
    report = run_flow([tree], db, dry_run=True)
    assert report["plan"]["removed"] == 1 and report["files"]["delete"][0].endswith("expenses.txt")
    assert read_pointer(db) == pointer


def test_chunk_settings_change_rebuilds(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db)
    report = run_flow([tree], db, overrides={"chunk_size": 300})
    assert report["rebuild"] == "chunking settings changed" and report["updated"] == 5


def test_formats_tree_indexes_readable_files_and_reports_the_rest(tmp_path, run_flow):
    formats = shared("formats")
    report = run_flow([formats], tmp_path / "db")
    errors = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in report["errors"]}
    assert list(errors) == ["password.pdf"] and "encrypted" in errors["password.pdf"]
    assert report["status"] == "partial"
    with quarry.open(tmp_path / "db") as idx:
        types = {r.path.rsplit(".", 1)[-1] for r in idx.search("table", k=200, mode="bm25").results}
        pdf = idx.search("LayoutParser unified toolkit", k=5).results
    assert {"pdf", "docx", "html"} <= types
    assert pdf[0].path.endswith(".pdf") and pdf[0].page_start >= 1


def test_failed_file_keeps_what_was_indexed_before(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    good = tree / "extra.pdf"
    shutil.copy(shared("pdf", "levels_of_agi.pdf"), good)
    first = run_flow([tree], db)
    assert first["failed"] == 0
    good.write_bytes(good.read_bytes()[:2000])  # now corrupt
    second = run_flow([tree], db)
    assert second["failed"] == 1 and "extra.pdf" in second["errors"][0]["path"]
    with quarry.open(db) as idx:
        hits = idx.search("Levels of AGI", k=3, mode="bm25").results
    assert hits and hits[0].path.endswith("extra.pdf")  # the earlier version is still searchable


class _CountingEmbedder:
    """Plans its own sub-batches, like the local ONNX and torch backends and the OpenAI provider."""

    model, dim, max_tokens, backend = "counting-16", 16, 256, "counting"
    plans_batches = True

    def __init__(self):
        from quarry.ingest.embedders.hashing import HashEmbedder

        self.inner = HashEmbedder(dim=16)
        self.model = "counting-16"
        self.sizes: list[int] = []
        self.calls = 0

    def embed(self, texts):
        self.sizes.append(len(texts))
        self.calls += 3  # three sub-batches, as the embedder itself counts them
        return self.inner.embed(texts)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


def test_the_flow_hands_the_embedder_whole_batches(tree, tmp_path, run_flow, monkeypatch):
    """One embed() call per flow batch with every chunk to embed: never one chunk per call (issue 14)."""
    import quarry.flows.index as flow_module

    fake = _CountingEmbedder()
    # the tasks get the embedder of the process they run in (the default runner: the flow's own)
    monkeypatch.setattr("quarry.tasks.embed.get_embedder", lambda settings: fake)
    monkeypatch.setattr("quarry.ingest.embedders.get_embedder", lambda settings: fake)  # token counts
    monkeypatch.setattr(flow_module, "describe", lambda settings: (fake.model, fake.dim))
    report = run_flow([tree], tmp_path / "db")
    assert report["embedded_chunks"] == report["chunks"] > 5
    assert fake.sizes == [report["chunks"]]  # 5 files are one flow batch
    assert report["model_calls"] == 3  # the embedder's own count of model calls, not embed() calls


def test_a_parser_version_bump_reparses_that_format_only(tree, tmp_path, run_flow, monkeypatch):
    from quarry.ingest import parsers

    db = tmp_path / "db"
    run_flow([tree], db)
    with quarry.open(str(db)) as idx:
        before = dict(idx.sql("SELECT rel_path, indexed_at FROM documents").rows)
    current = parsers.format_versions()
    monkeypatch.setattr(parsers, "format_versions", lambda: {**current, "md": current["md"] + 1})
    report = run_flow([tree], db)
    assert report["reparsed_formats"] == ["md"] and not report["rebuild"]
    assert report["updated"] == 2 and report["skipped"] == 3
    with quarry.open(str(db)) as idx:
        after = dict(idx.sql("SELECT rel_path, indexed_at FROM documents").rows)
    assert {p for p in after if after[p] != before[p]} == {
        "runbooks/deploys.md",
        "runbooks/incident-2024-03-postmortem.md",
    }
    again = run_flow([tree], db)  # the new version is recorded: nothing to do
    assert again["reparsed_formats"] == [] and again["updated"] == 0 and again["skipped"] == 5
