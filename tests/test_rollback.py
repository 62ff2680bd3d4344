"""`quarry rollback`: an earlier kept generation made current again, as a new generation, on a local
store and on an ``s3://`` store; retention decides how far back; refused while a run holds the store."""

from __future__ import annotations

import json

import pytest

from quarry.core.errors import StoreLocked, UsageError
from quarry.store import generations
from quarry.store.layout import WriterLock
from quarry.store.pointer import read_pointer
from quarry.store.rollback import list_generations, rollback


def _tree(root, n):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"note{i:02d}.md").write_text(f"# Note {i}\n\nThe heron colony number {i} nests by the reservoir.\n")
    return root


def _paths(cli, db, query="heron colony number", env=None) -> set[str]:
    done = cli("search", query, "--db", db, "--mode", "bm25", "-k", "50", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return {r["path"].rsplit("/", 1)[-1] for r in json.loads(done.stdout)["results"]}


def _status(cli, db, env=None) -> dict:
    done = cli("status", "--db", db, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_rollback_restores_the_previous_generation_and_can_be_undone(cli, tmp_path):
    import quarry

    tree, db = _tree(tmp_path / "tree", 20), tmp_path / "db"
    quarry.index(tree, db)  # the setting: in-process (the CLI's runs are the ones below)
    for i in range(15):
        (tree / f"note{i:02d}.md").unlink()
    (tree / "fresh.md").write_text("# Fresh\n\nA kingfisher arrived at the reservoir.\n")
    assert cli("index", tree, "--db", db, "--allow-deletes").returncode == 0
    assert _status(cli, db)["documents"] == 6 and _status(cli, db)["generation"] == 2

    listed = cli("rollback", "--db", db, "--list", "--json")
    assert [(g["generation"], g["current"], g["restorable"], g["documents"]) for g in json.loads(listed.stdout)] == [
        (2, True, True, 6),
        (1, False, True, 20),
    ]
    done = cli("rollback", "--db", db)
    assert done.returncode == 0, done.stderr
    assert "rolled back from generation 2 to the state of generation 1 (committed as generation 3)" in done.stdout
    status = _status(cli, db)
    assert (status["documents"], status["generation"]) == (20, 3)
    assert "note07.md" in _paths(cli, db) and "fresh.md" not in _paths(cli, db, "kingfisher reservoir")
    # vectors came back too: a vector search finds a restored note
    done = cli("search", "heron colony number 7", "--db", db, "--mode", "vector", "-k", "50", "--json")
    assert any(r["path"].endswith("note07.md") for r in json.loads(done.stdout)["results"])
    runs = json.loads(cli("runs", "--db", db, "--json").stdout)
    assert [r["status"] for r in runs[:3]] == ["rollback", "completed", "completed"]  # history kept, not rolled back
    assert runs[0]["message"].startswith("rolled back from generation 2")

    done = cli("rollback", "--db", db, "--to", "2")  # undo: generation 2 is still kept
    assert done.returncode == 0, done.stderr
    assert _status(cli, db)["documents"] == 6 and "fresh.md" in _paths(cli, db, "kingfisher reservoir")
    assert cli("doctor", "--db", db).returncode == 0

    # an index run on top of a rolled-back store works as on any other
    (tree / "later.md").write_text("# Later\n\nThe heron colony grew.\n")
    done = cli("index", tree, "--db", db, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["added"] == 1, done.stderr


def test_rollback_goes_no_further_than_the_kept_generations(cli, tmp_path):
    import quarry

    tree, db = _tree(tmp_path / "tree", 3), tmp_path / "db"
    for i in range(4):  # four commits (in-process: the setting): generations 1-4; 3 and 4 are kept
        (tree / f"extra{i}.md").write_text(f"# Extra {i}\n\nMore notes, number {i}.\n")
        quarry.index(tree, db)
    store = tmp_path / "db"
    assert generations.local_generations(store) == [3, 4]
    assert sorted(p.name for p in store.glob("index-*")) == ["index-000003", "index-000004"]
    done = cli("rollback", "--db", db, "--to", "1")
    assert done.returncode == 2 and "generation 1 is not kept (kept earlier generations: 3" in done.stderr
    done = cli("rollback", "--db", db, "--to", "4")
    assert done.returncode == 2 and "already the current one" in done.stderr
    env = {"QUARRY_KEEP_GENERATIONS": "1"}
    (tree / "extra9.md").write_text("# Extra 9\n\nOne more.\n")
    assert cli("index", tree, "--db", db, env=env).returncode == 0
    assert generations.local_generations(store) == [5]
    done = cli("rollback", "--db", db, env=env)
    assert done.returncode == 2 and "no earlier generation to roll back to" in done.stderr


def test_rollback_is_refused_while_a_run_holds_the_store(prefect_api, tmp_path):
    import quarry

    tree, db = _tree(tmp_path / "tree", 3), tmp_path / "db"
    quarry.index(tree, db)
    (tree / "x.md").write_text("# X\n\nx\n")
    quarry.index(tree, db)
    import multiprocessing

    ready, release = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.get_context("fork").Process(target=_hold, args=(str(db), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(StoreLocked, match="locked by another index run"):
            rollback(db)
    finally:
        release.set()
        holder.join(30)
    assert rollback(db)["to_generation"] == 1


def _hold(db, ready, release):
    from pathlib import Path

    with WriterLock(Path(db)):
        ready.set()
        release.wait(60)


def test_a_generation_from_an_older_quarry_cannot_be_a_target(prefect_api, tmp_path):
    import duckdb

    import quarry

    tree, db = _tree(tmp_path / "tree", 3), tmp_path / "db"
    quarry.index(tree, db)
    (tree / "x.md").write_text("# X\n\nx\n")
    quarry.index(tree, db)
    for name in ("catalog-000001.duckdb", "catalog-000002.duckdb"):  # as an older quarry wrote them
        con = duckdb.connect(str(db / name))
        con.execute("DELETE FROM meta WHERE key IN ('vector_table', 'vector_version', 'previous_pointer')")
        con.close()
    assert [g["restorable"] for g in list_generations(db)] == [True, False]
    with pytest.raises(UsageError, match="committed by an older quarry"):
        rollback(db)
    assert read_pointer(db).generation == 2 and not (db / "catalog-000003.duckdb").exists()


def test_the_versions_of_kept_generations_survive_pruning(prefect_api, tmp_path, monkeypatch):
    """LanceDB versions older than the prune age go, except those a kept generation names."""
    import quarry
    from quarry.store import vectors

    monkeypatch.setattr(vectors, "prune", _prune_now(vectors.prune))
    monkeypatch.setattr(vectors, "prune_due", lambda table, keep_for=None: True)  # prune at every commit
    tree, db = _tree(tmp_path / "tree", 4), tmp_path / "db"
    quarry.index(tree, db)
    first = read_pointer(db)
    (tree / "note00.md").write_text("# Note 0\n\nRewritten completely: an osprey.\n")
    quarry.index(tree, db)
    table = vectors.connect(db).open_table(first.vector_table)
    assert first.vector_version in {v["version"] for v in table.list_versions()}
    assert rollback(db)["to_generation"] == 1
    with quarry.open(db) as index:
        assert index.search("osprey", mode="bm25").results == []


def test_a_generation_maintain_compacted_rolls_back_to_its_compacted_version(cli, tmp_path):
    """maintain moves the current generation's pointer to a compacted version and prunes the rest;
    the next commit records that pointer, so a rollback restores the compacted version."""
    import quarry

    tree, db = _tree(tmp_path / "tree", 4), tmp_path / "db"
    for i in range(3):  # three generations, in-process: the setting
        (tree / f"note0{i}.md").write_text(f"# Note {i}\n\nEdited {i}: a grebe.\n")
        quarry.index(tree, db)
    assert cli("maintain", "--db", db, "--keep-versions-hours", "0").returncode == 0
    compacted = read_pointer(db)
    (tree / "note03.md").write_text("# Note 3\n\nAn egret.\n")
    assert cli("index", tree, "--db", db).returncode == 0
    assert cli("maintain", "--db", db, "--keep-versions-hours", "0").returncode == 0
    assert generations.state_of(db, compacted.generation, read_pointer(db)) == (
        compacted.vector_table,
        compacted.vector_version,
    )
    done = cli("rollback", "--db", db)
    assert done.returncode == 0, done.stderr
    assert "egret" not in "".join(_paths(cli, db, "egret")) and cli("doctor", "--db", db).returncode == 0


def _prune_now(prune):
    from datetime import timedelta

    def now(table, keep_for=timedelta(hours=1), keep_versions=frozenset()):
        return prune(table, timedelta(0), keep_versions)

    return now


def test_rollback_on_a_store_on_object_storage(cli, tmp_path, s3):
    from s3server import new_bucket

    url = f"s3://{new_bucket(s3)}/store"
    writer = {"QUARRY_STORE_CACHE": str(tmp_path / "cache-writer")}
    tree = _tree(tmp_path / "tree", 12)
    assert cli("index", tree, "--db", url, env=writer).returncode == 0
    for i in range(10):
        (tree / f"note{i:02d}.md").unlink()
    assert cli("index", tree, "--db", url, "--allow-deletes", env=writer).returncode == 0
    # a rollback from another machine: its cache has never seen generation 1
    other = {"QUARRY_STORE_CACHE": str(tmp_path / "cache-other")}
    done = cli("rollback", "--db", url, env=other)
    assert done.returncode == 0, done.stderr
    reader = {"QUARRY_STORE_CACHE": str(tmp_path / "cache-reader")}
    assert _status(cli, url, reader)["documents"] == 12 and _status(cli, url, reader)["generation"] == 3
    assert "note03.md" in _paths(cli, url, env=reader)
    done = cli("sql", "SELECT count(*) AS n FROM chunks_full", "--db", url, "--format", "json", env=reader)
    assert json.loads(done.stdout) == [{"n": 12}], done.stderr  # quarry sql reads the current generation of a bucket
    (tree / "new.md").write_text("# New\n\nA heron colony appears.\n")
    done = cli("index", tree, "--db", url, "--allow-deletes", env=writer)
    assert done.returncode == 0, done.stderr
    assert _status(cli, url, reader)["documents"] == 3
