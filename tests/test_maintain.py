"""``quarry maintain`` on a local store, on one on moto's S3 server and on one on Azurite."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest
from azuriteserver import azurite_server, new_container
from conftest import SAMPLE
from s3server import aws_env, moto_server, new_bucket
from test_crash import edit_tree

import quarry
from quarry.store import maintain, vectors
from quarry.store.handle import open_store
from quarry.store.layout import WriterLock
from quarry.store.pointer import read_pointer


@pytest.fixture
def tree(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "tree")
    return tmp_path / "tree"


def _fragments(store):
    pointer = read_pointer(store)
    table = vectors.open_for_read(store, pointer.vector_table, pointer.vector_version)
    return table.stats()["fragment_stats"]["num_fragments"], pointer


def test_maintain_compacts_and_moves_the_pointer(tree, tmp_path, run_flow, cli):
    db = tmp_path / "db"
    run_flow([tree], db)
    edit_tree(tree)
    run_flow([tree], db)
    before, pointer = _fragments(db)
    assert before > 1
    done = cli("maintain", "--db", db, "--keep-versions-hours", "0", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "completed" and report["check"]["healthy"]
    # the previous generation is kept (for `quarry rollback`), and with it the versions since its own
    assert report["compaction"]["fragments_after"] == 1 and report["compaction"]["versions_after"] > 1
    assert (db / "catalog-000001.duckdb").exists()
    done = cli("maintain", "--db", db, "--keep-versions-hours", "0", "--keep-generations", "1", "--json")
    report = json.loads(done.stdout)
    assert report["compaction"]["versions_after"] == 1 and not (db / "catalog-000001.duckdb").exists()
    after, moved = _fragments(db)
    assert after == 1 and moved.generation == pointer.generation and moved.vector_version > pointer.vector_version
    # the next run builds on the compacted version instead of rolling it back
    (tree / "more.md").write_text("# More\n\nAnother page about rollback drills.\n")
    assert run_flow([tree], db)["added"] == 1
    assert _fragments(db)[1].vector_version > moved.vector_version
    with quarry.open(db) as idx:
        assert idx.search("rollback drills", k=3).results


def test_maintain_merges_the_layers_and_rollback_goes_back_before_it(tree, tmp_path, run_flow, cli, monkeypatch):
    """Small commits leave catalog layers and index segments; maintain merges them into one
    generation of one whole catalog and one segment, answering as before; rollback undoes it."""
    monkeypatch.setenv("QUARRY_REBASE_SHARE", "100")  # commits never merge into a new base themselves
    db = tmp_path / "db"
    run_flow([tree], db)
    edit_tree(tree)
    run_flow([tree], db)
    layered = read_pointer(db)
    assert layered.layers == (1, 2)

    def answers():
        with quarry.open(db) as idx:
            status = idx.status()
            return (
                [(r.chunk_id, r.path, round(r.score, 6)) for r in idx.search("kestrel budget review", k=5).results],
                status["chunks"],
                status["documents"],
            )

    before = answers()
    done = cli("maintain", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["merge"] == {**report["merge"], "merged": True, "layers_before": 2, "generation": 3}
    merged = read_pointer(db)
    assert merged.layers == (3,) and merged.generation == 3
    segments = json.loads((db / "index-000003" / "index.json").read_text())["segments"]
    assert [(s["generation"], s["rows"], s["documents"]) for s in segments] == [(3, before[1], before[2])]
    assert answers()[1:] == before[1:] and {c for c, _, _ in answers()[0]} == {c for c, _, _ in before[0]}
    assert report["check"]["healthy"]
    again = json.loads(cli("maintain", "--db", db, "--json").stdout)  # nothing left to merge
    assert not again["merge"]["merged"] and read_pointer(db).generation == 3
    assert cli("rollback", "--db", db, "--to", "2").returncode == 0
    assert read_pointer(db).layers == (1, 2, 4) and answers()[1:] == before[1:]
    assert cli("doctor", "--db", db).returncode == 0


def test_a_stale_index_is_rebuilt(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db)
    with WriterLock(db):  # an index made by hand, committed like maintain's own changes
        pointer = read_pointer(db)
        table = vectors.open_for_write(db, pointer.model, pointer.dim, pointer.vector_version)
        table.create_scalar_index("text_hash", replace=True)
        maintain.move_pointer(db, pointer, table.version)
        assert [i["rebuilt"] for i in maintain.reindex(db, threshold=0.2)] == [False]
    edit_tree(tree)
    run_flow([tree], db)  # new rows the index does not cover yet
    with WriterLock(db):
        out = maintain.reindex(db, threshold=0.0)
    assert [(i["column"], i["rebuilt"]) for i in out] == [("text_hash", True)]
    assert out[0]["unindexed_share"] > 0
    pointer = read_pointer(db)
    table = vectors.open_for_read(db, pointer.vector_table, pointer.vector_version)
    assert [i.num_unindexed_rows for i in table.list_indices()] == [0]


def test_maintain_skips_a_busy_store(tmp_path, tree, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db)
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(db), held, release))
    proc.start()
    try:
        assert held.wait(60)
        assert maintain.maintain(db, if_busy="skip")["status"] == "skipped"
    finally:
        release.set()
        proc.join(30)


def _hold(db, held, release):
    from pathlib import Path

    with WriterLock(Path(db)):
        held.set()
        release.wait(60)


@pytest.mark.parametrize("scheme", ["s3", "az"])
def test_maintain_on_object_storage_applies_the_retention(scheme, tree, tmp_path, run_flow, monkeypatch):
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache"))
    server, container = (moto_server, new_bucket) if scheme == "s3" else (azurite_server, new_container)
    with server() as (endpoint, env), aws_env(env):
        url = f"{scheme}://{container(endpoint)}/store"
        run_flow([tree], url)
        edit_tree(tree)
        run_flow([tree], url)
        store = open_store(url)
        objects = store.remote.objects
        assert {k for k in objects.list("") if k.startswith("catalog-")} == {
            "catalog-000001.duckdb",
            "catalog-000002.duckdb",
        }
        report = maintain.maintain(store, generations=1, keep=timedelta(0))
        assert report["check"]["healthy"], report["check"]
        assert report["compaction"]["fragments_after"] == 1
        assert {k.split("/")[0] for k in objects.list("") if k.startswith(("catalog-", "index-"))} == {
            "catalog-000002.duckdb",
            "index-000002",
        }
        assert "lease" not in objects.list("")
        monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "reader"))
        with quarry.open(url) as idx:
            assert idx.snapshot.pointer.vector_version == report_version(objects)
            assert [r for r in idx.search("kestrel budget", k=3, mode="bm25").results if "kestrel" in r.text]


def report_version(objects) -> int:
    return json.loads(objects.get("CURRENT")[0])["vector_version"]


def test_two_handles_of_a_layered_store_in_one_process(tree, tmp_path, run_flow, monkeypatch):
    """DuckDB shares one database instance between a process's connections to the same file, with
    its attachments: a second snapshot of a delta finds its layers attached already and reads on."""
    monkeypatch.setenv("QUARRY_REBASE_SHARE", "100")
    db = tmp_path / "db"
    run_flow([tree], db)
    edit_tree(tree)
    run_flow([tree], db)
    assert read_pointer(db).layers == (1, 2)
    with quarry.open(db) as first, quarry.open(db) as second:
        a = [r.chunk_id for r in first.search("deploy", k=5).results]
        b = [r.chunk_id for r in second.search("deploy", k=5).results]
        assert a and a == b
        assert first.status()["chunks"] == second.status()["chunks"]
    with quarry.open(db) as third:  # after both closed
        assert [r.chunk_id for r in third.search("deploy", k=5).results] == a
