"""DuckDB's full-text tables: a sidecar per generation, built after the commit, read by ``quarry sql``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import duckdb
import pytest

from conftest import ROOT, SAMPLE
from quarry.core.settings import Settings
from quarry.store import catalog, fts
from quarry.store.pointer import read_pointer

BM25_SQL = ("SELECT d.rel_path, fts_main_chunks.match_bm25(c.chunk_id, 'pottery kiln') AS score "
            "FROM chunks c JOIN documents d USING (doc_id) WHERE score IS NOT NULL ORDER BY score DESC")
ON = {"duckdb_fts": True}


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(SAMPLE, root)
    (root / "kiln.md").write_text("# Kiln\n\nThe pottery kiln reaches cone six in eleven hours; "
                                  "load the pottery on the lowest shelf.\n")
    return root


def index(tree, db, **overrides):
    from quarry.flows.index import index_flow

    return index_flow([str(tree)], db=str(db), overrides={**ON, **overrides})


def opened(db, **overrides):
    import quarry

    return quarry.open(str(db), settings=Settings.from_env(**{**ON, **overrides}))


def builder(db, **env):
    """The detached builder, run in the foreground."""
    return subprocess.run([sys.executable, "-m", "quarry.store.fts", str(db)], check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, capture_output=True, text=True,
                          timeout=300)


def test_quarry_sql_ranks_with_match_bm25_after_a_commit(tree, tmp_path, prefect_api, cli):
    db = tmp_path / "db"
    index(tree, db)
    gen = read_pointer(db).generation
    assert fts.wait(db, gen, timeout=120) == "ready"  # the commit's detached builder
    with opened(db) as idx:
        rows = idx.sql(BM25_SQL).rows
        assert rows[0][0] == "kiln.md" and rows[0][1] > 0
        assert idx.status()["full_text"]["state"] == "ready"
        # the search path is the catalog's again afterwards: a plain query reads plain tables
        assert idx.sql("SELECT count(*) FROM documents").rows[0][0] == 6

    out = cli("sql", BM25_SQL, "--db", db, "--format", "json", env={"QUARRY_DUCKDB_FTS": "1"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["rel_path"] == "kiln.md"


def test_a_commit_that_changes_no_chunk_links_the_tables_and_one_that_does_rebuilds_them(tree, tmp_path,
                                                                                          prefect_api, monkeypatch):
    db = tmp_path / "db"
    index(tree, db)
    first = read_pointer(db).generation
    assert fts.wait(db, first, timeout=120) == "ready"

    (tree / "kiln.md").rename(tree / "pottery.md")  # a move: same bytes, same chunks
    index(tree, db)
    moved = read_pointer(db).generation
    assert moved == first + 1
    assert fts.path(db, moved).stat().st_ino == fts.path(db, first).stat().st_ino

    (tree / "pottery.md").write_text("# Kiln\n\nThe glaze firing needs a slower kiln ramp.\n")
    index(tree, db)
    edited = read_pointer(db).generation
    assert fts.wait(db, edited, timeout=120) == "ready"
    assert fts.path(db, edited).stat().st_ino != fts.path(db, moved).stat().st_ino
    assert not fts.path(db, first).exists()  # past the retention of two generations
    with opened(db) as idx:
        assert idx.sql(BM25_SQL.replace("pottery kiln", "glaze")).rows[0][0] == "pottery.md"


def test_a_build_under_way_never_blocks_a_reader(tree, tmp_path, prefect_api):
    db = tmp_path / "db"
    index(tree, db, duckdb_fts=False)
    gen = read_pointer(db).generation
    release = tmp_path / "release"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUARRY_FAULT": f"pause:{fts.BUILD_FAULT}",
           "QUARRY_FAULT_FILE": str(release)}
    child = subprocess.Popen([sys.executable, "-m", "quarry.store.fts", str(db)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "release.paused").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fts.state(db, gen) == "building"
        with opened(db) as idx:
            t0 = time.perf_counter()
            assert idx.search("pottery kiln", k=3).results[0].path.endswith("kiln.md")
            assert idx.sql("SELECT count(*) FROM chunks").rows[0][0] > 0
            assert idx.status()["full_text"]["state"] == "building"
            assert time.perf_counter() - t0 < 10
    finally:
        release.touch()
        assert child.wait(timeout=120) == 0
    assert fts.state(db, gen) == "ready"


def test_a_builder_killed_mid_build_leaves_the_store_usable(tree, tmp_path, prefect_api):
    from quarry.store.doctor import diagnose

    db = tmp_path / "db"
    index(tree, db, duckdb_fts=False)
    gen = read_pointer(db).generation
    killed = builder(db, QUARRY_FAULT=fts.BUILD_FAULT)
    assert killed.returncode == -9
    assert list(db.glob(f"{fts.file_name(gen)}.tmp-*")) and fts.state(db, gen) == "missing"
    assert diagnose(db).healthy
    with opened(db) as idx:
        assert idx.search("pottery kiln", k=3).results[0].path.endswith("kiln.md")
        assert idx.sql(BM25_SQL).rows[0][0] == "kiln.md"  # built here, the dead builder's file removed
    assert fts.state(db, gen) == "ready" and not list(db.glob(f"{fts.file_name(gen)}.tmp-*"))


def test_off_builds_nothing_and_says_so(tree, tmp_path, prefect_api):
    db = tmp_path / "db"
    index(tree, db, duckdb_fts=False)
    gen = read_pointer(db).generation
    assert fts.state(db, gen) == "missing"
    with opened(db, duckdb_fts=False) as idx:
        assert idx.status()["full_text"]["state"] == "off"
        with pytest.raises(Exception, match="QUARRY_DUCKDB_FTS=0"):
            idx.sql(BM25_SQL)
    assert not fts.path(db, gen).exists()


def test_commits_while_a_builder_works_start_no_other_and_it_builds_the_newest(tree, tmp_path, prefect_api):
    db = tmp_path / "db"
    index(tree, db, duckdb_fts=False)
    first = read_pointer(db).generation
    held = fts._lock(db, blocking=False)  # a builder at work
    try:
        (tree / "new-note.md").write_text("# Note\n\nA new page about gardening.\n")
        index(tree, db)  # its commit finds the lock held: no second builder
        assert fts.state(db, read_pointer(db).generation) == "building"
        assert fts.start(db, read_pointer(db).generation) is None
    finally:
        os.close(held)
    assert builder(db).returncode == 0  # what the builder does next: the generation now current
    assert fts.state(db, first + 1) == "ready" and not fts.path(db, first).exists()


def test_an_older_quarrys_fts_index_in_a_copied_catalog_is_dropped(tmp_path):
    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    con.execute("CREATE TABLE chunks (chunk_id VARCHAR, search_text VARCHAR)")
    con.execute("INSERT INTO chunks VALUES ('a', 'pottery kiln')")
    catalog.rebuild_fts(con)
    assert catalog.has_fts(con)
    catalog.drop_fts(con)
    assert not catalog.has_fts(con)


def test_without_the_extension_asking_for_it_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(catalog.importlib.util, "find_spec", lambda name: None)
    catalog.fts_extension_path.cache_clear()
    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    try:
        with pytest.raises(Exception, match="match_bm25 needs it"):
            catalog.rebuild_fts(con)
        assert not fts.available()
        assert fts.start(tmp_path, 1) is None  # nothing to start: the commit stands without them
        with pytest.raises(Exception, match=r"duckdb-ext-fts"):
            fts.ensure(tmp_path, 1)
    finally:
        catalog.fts_extension_path.cache_clear()
