"""``quarry maintain`` on a local store, on one on moto's S3 server and on one on Azurite."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest

import quarry
from conftest import SAMPLE
from quarry.core.storeurl import local_dir
from quarry.store import maintain, vectors
from quarry.store.layout import WriterLock
from quarry.store.pointer import read_pointer
from quarry.store.remote import remote_of
from azuriteserver import azurite_server, new_container
from s3server import aws_env, moto_server, new_bucket
from test_crash import edit_tree


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
        store = local_dir(url)
        objects = remote_of(store).objects
        assert {k for k in objects.list("") if k.startswith("catalog-")} == {"catalog-000001.duckdb",
                                                                              "catalog-000002.duckdb"}
        report = maintain.maintain(store, generations=1, keep=timedelta(0))
        assert report["check"]["healthy"], report["check"]
        assert report["compaction"]["fragments_after"] == 1
        assert {k.split("/")[0] for k in objects.list("") if k.startswith(("catalog-", "index-"))} == {
            "catalog-000002.duckdb", "index-000002"}
        assert "lease" not in objects.list("")
        monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "reader"))
        with quarry.open(url) as idx:
            assert idx.snapshot.pointer.vector_version == report_version(objects)
            assert [r for r in idx.search("kestrel budget", k=3, mode="bm25").results if "kestrel" in r.text]


def report_version(objects) -> int:
    return json.loads(objects.get("CURRENT")[0])["vector_version"]
