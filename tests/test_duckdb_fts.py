"""QUARRY_DUCKDB_FTS=1: the committed catalog carries DuckDB's own FTS index for plain SQL."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from conftest import SAMPLE
from quarry.store import catalog


def committed_catalog(db) -> str:
    pointer = json.loads((db / "CURRENT").read_text())
    return str(db / pointer["catalog"])


def test_duckdb_fts_is_committed_only_when_asked(tmp_path, prefect_api):
    from quarry.flows.index import index_flow

    db, tree = tmp_path / "db", tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    index_flow([str(tree)], db=str(db), overrides={"duckdb_fts": True})
    con = duckdb.connect(committed_catalog(db), read_only=True)
    con.execute(f"LOAD '{catalog.fts_extension_path()}'")
    rows = con.execute(
        "SELECT chunk_id, fts_main_chunks.match_bm25(chunk_id, 'rollback deploy') AS score FROM chunks "
        "WHERE score IS NOT NULL ORDER BY score DESC LIMIT 3").fetchall()
    con.close()
    assert rows and all(score > 0 for _, score in rows)

    # The next run that commits (one new file) without the setting leaves no stale index behind.
    (tree / "new-note.md").write_text("# Note\n\nA new page about gardening.\n")
    index_flow([str(tree)], db=str(db))
    with duckdb.connect(committed_catalog(db), read_only=True) as con:
        assert not catalog.has_fts(con)


def test_without_the_extension_asking_for_it_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(catalog.importlib.util, "find_spec", lambda name: None)
    catalog.fts_extension_path.cache_clear()
    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    try:
        with pytest.raises(Exception, match="QUARRY_DUCKDB_FTS=1 needs it"):
            catalog.rebuild_fts(con)
    finally:
        catalog.fts_extension_path.cache_clear()
