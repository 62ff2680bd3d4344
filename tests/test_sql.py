"""Every .sql file runs against a real DuckDB, and the FTS setup keeps numbers and codes."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from quarry.core.sqlfiles import in_schema, load_sql, sql_names, statements
from quarry.retrieval import searchindex
from quarry.store import acl as store_acl
from quarry.store import catalog, layers
from quarry.store.writer import insert_run

ALL_SQL = sql_names()


@pytest.fixture
def con(tmp_path):
    c = catalog.create(tmp_path / "c.duckdb")
    now = dt.datetime(2024, 1, 2, 3, 4, 5)
    c.execute(
        "INSERT INTO documents (doc_id, path, root, rel_path, file_type, size, mtime, sha256, title, summary, n_pages, "
        "n_sections, n_chunks, metadata, indexed_at, run_id, path_bytes, principals, page_offsets, ocr_page_numbers, "
        "warnings) VALUES ('d1', '/r/a.md', '/r', 'a.md', 'md', 10, ?, 'sha', 'Title', 'Sum', NULL, 1, 1,"
        " '{}', ?, 'run0', NULL, ['group:hr'], [0, 120], [2], ['page 3 could not be read'])",
        [now, now],
    )
    c.execute("INSERT INTO sections VALUES ('d1', 0, 'Intro', 1, 0, 10, NULL, NULL, NULL)")
    c.execute(
        "INSERT INTO chunks (chunk_id, doc_id, section_index, chunk_index, start_char, end_char, page_start, page_end, "
        "header, text, text_hash, n_tokens, search_text) VALUES ('d1:0', 'd1', 0, 0, 0, 10, NULL, NULL, 'Document: Title', "
        "'error E11000 in FY2018', 'h', 5, 'document title error e11000 e 11000 in fy2018 fy 2018')"
    )
    searchindex.use_source(c, "main")  # the temporary views the index queries read
    c.execute(layers.chunk_rows_sql((1,), {1: 0}))  # and the one filter_rows.sql reads
    yield c
    c.close()


@pytest.fixture
def delta(con, tmp_path):
    """A delta layer (generation 2) over the catalog of ``con`` (generation 1)."""
    con.execute("CHECKPOINT")
    con.close()
    (tmp_path / "c.duckdb").rename(tmp_path / "catalog-000001.duckdb")
    c, chain, private, is_delta = layers.open_over(tmp_path, 1, None, 2)
    assert is_delta and chain == (1, 2) and not private
    yield c
    c.close()


def test_every_sql_file_is_known():
    # A new .sql file must be added to the parametrized run below.
    assert set(ALL_SQL) == set(PARAMS)


PARAMS = {
    "schema": None,
    "fts_rebuild": None,
    "bm25_search": ["2018", 5],
    "hydrate_chunks": [["d1:0"]],
    "plan_documents": [2.0],
    "delete_documents": [["nope"]],
    "stored_documents": [["d1", "nope"]],
    "move_documents": "moved_documents",
    "touch_documents": "touched_documents",
    "moved_chunks": "moved_paths",
    "insert_documents": "arrow",
    "insert_run": "run",
    "status": None,
    "list_runs": [10],
    "get_meta": None,
    "set_meta": ["k", "v"],
    "chunk_positions": ["d1:0\nnope:1"],
    "document_sizes": ["d1"],
    "window_chunks": ["d1 0 0\nd1 1 3"],
    "export_documents": [True],
    "export_sections": [False],
    "export_chunks": ["d1:0", "d1:0"],
    "export_count": None,
    "filter_rows": None,
    "bm25_texts": None,
    "index_rows": None,
    "index_documents": None,
    "index_cards": None,
    "run_ids": None,
    "sql_views": None,
    # delta layers (the `delta` fixture)
    "layer_schema": None,
    "layer_set_owners": [["d1"], 2, None],
    "layer_move_documents": "moved_documents",
    "layer_touch_documents": "touched_documents",
    "layer_kind": [None],
    "layer_rows": None,
    "layer_previous_owners": [["d1"]],
    "catalog_columns": ["c"],
    "layer_columns": ["c", "main", "chunks"],
    "acl_sources": None,
    "acl_set_source": ["/r", "rules", "/etc/quarry/acl.yaml"],
    "acl_principals": None,
    "acl_apply": "acl",
    "acl_apply_documents": "acl",
    "layer_acl_apply": "acl",
    "layer_acl_apply_documents": "acl",
    "document_view": ["d1"],
    "document_sections": ["d1"],
    "document_chunks": ["d1"],
    "chunk_view": ["d1:0"],
    "status_readable": None,
    "document_layout": ["d1"],
    "document_failures": ["/r/a.md", dt.datetime(2024, 1, 1)],
    "document_chunk_text": ["d1", 0, 5],
    "run_view": ["r"],
    "eval_documents": None,
    "eval_chunks": [["d1"]],
    "eval_sections": [["d1"]],
    "eval_term_counts": None,
    "evals_table": None,
    "evals_insert": "evals",
    "acl_counts": None,
    # corpus preparation: duplicates, collapse, the corpus report
    "collapse_copies": ["h1\nh2", 20],
    "collapse_keys": ["d1:0"],
    "collapse_candidates": None,
    "corpus_boilerplate": [2, 0.5],
    "corpus_duplicates": None,
    "corpus_languages": None,
    "corpus_pii": None,
    "corpus_totals": None,
    "dedup_apply": "wanted_dups",
    "dedup_candidates": None,
    "dedup_members": [["d1"]],
    "export_unreadable": None,
    "layer_dedup_apply": "wanted_dups",
    "corpus_boilerplate_lines": [2, 0.5],
    "boilerplate_lines": [["d1"]],
    "document_roots": [["d1"]],
    "boilerplate_counts": [[1, 2]],
    "boilerplate_roots": None,
    "boilerplate_chunks": [["d1"], [1, 2]],
    "boilerplate_all": [3, 0.02, True],
    "boilerplate_apply": "wanted_boilerplate",
    "layer_boilerplate_apply": "wanted_boilerplate",
    "layer_boilerplate_copy": "wanted_boilerplate",
    "layer_boilerplate_copied": "wanted_boilerplate",
    "boilerplate_wanted": None,
    "boilerplate_add": "boilerplate_rows",
    "boilerplate_drop": None,
    "boilerplate_all_flags": "boilerplate_all",
    "boilerplate_all_rows": "boilerplate_all",
    "boilerplate_all_count": "boilerplate_all",
    "boilerplate_wanted_docs": "wanted_boilerplate",
}

MOVED = [("d1", "/r/b\udce9.md", "/r", "b.md", dt.datetime(2024, 1, 1), "run1")]
REGISTERED = {
    "moved_documents": lambda: layers.moves_table(MOVED),
    "touched_documents": lambda: layers.touches_table([("d1", dt.datetime(2024, 1, 1), "run1")]),
    "moved_paths": lambda: layers.moves_table(MOVED).select(["doc_id", "path"]),
    "wanted_dups": lambda: pa.table(
        {
            "doc_id": ["d1"],
            "dup_cluster": ["d1"],
            "dup_of": pa.array([None], pa.string()),
            "dup_similarity": pa.array([1.0], pa.float64()),
        }
    ),
    "wanted_boilerplate": lambda: pa.table(
        {"chunk_id": ["d1:0"], "doc_id": ["d1"], "boilerplate": [0.5], "search_text": ["x"], "text_hash": ["h"]}
    ),
    "boilerplate_all": lambda: pa.table(
        {
            "chunk_id": ["d1:0"],
            "doc_id": ["d1"],
            "share": [0.5],
            "boiler": pa.array([[1]], pa.list_(pa.int64())),
            "stored": pa.array([None], pa.float64()),
        }
    ),
}


@pytest.mark.parametrize("name", ALL_SQL)
def test_sql_file_runs(request, con, name):
    if name.startswith("layer_"):
        con = request.getfixturevalue("delta")
    else:
        catalog.rebuild_fts(con)
    params = PARAMS[name]
    if params == "run":
        insert_run(
            con,
            {
                "run_id": "r",
                "started": dt.datetime.now(),
                "status": "completed",
                "roots": ["/r"],
                "errors": [],
                "durations": {},
                "settings": {},
            },
        )
        assert con.execute("SELECT count(*) FROM runs WHERE run_id = 'r'").fetchone()[0] == 1
        return
    if params == "acl":
        key = "doc_id" if name.endswith("documents") else "path"
        con.register(
            "wanted_acl",
            pa.table(
                {key: [("d1" if key == "doc_id" else "/r/a.md"), "nope"], "principals": [["public"], ["group:x"]]}
            ),
        )
        if name.startswith("layer_"):  # the documents rows go into the layer, which then owns them
            assert layers.rewrite_principals(con, name, 2, 1) == ["d1"]
            assert layers.rewrite_principals(con, name, 2, 1) == []  # equal now: nothing to write
            assert con.execute("SELECT doc_id, doc_layer, content_layer FROM layer.owners").fetchall() == [("d1", 2, 1)]
        else:
            assert con.execute(load_sql(name)).fetchall() == [("d1",)]  # the one document that exists, and differed
            assert con.execute(load_sql(name)).fetchall() == []  # equal now: nothing to write
        assert con.execute(load_sql("acl_principals")).fetchall() == []  # public now: only others are listed
        assert dict(store_acl.stored(con)) == {"/r/a.md": ("public",)}
        return
    if params == "evals":
        for stmt in statements("evals_table"):
            con.execute(stmt)
        con.execute(
            load_sql(name),
            [
                "e1",
                dt.datetime(2024, 1, 1),
                "s",
                "known-item",
                3,
                "hybrid",
                10,
                20,
                0.9,
                0.7,
                "{}",
                '{"recall@10": 0.9}',
                None,
                1.5,
                None,
            ],
        )
        assert con.execute("SELECT metrics->>'recall@10' FROM evals").fetchone() == ("0.9",)
        return
    if params == "arrow":
        for table in ("new_documents", "new_sections", "new_chunks"):
            src = table.removeprefix("new_")
            con.register(table, con.execute(f"SELECT * FROM {src} LIMIT 0").fetch_arrow_table())
        for stmt in statements(name):
            con.execute(stmt)
        return
    if name in ("boilerplate_add", "boilerplate_all_flags"):  # they write into the commit's temporary table
        con.execute(load_sql("boilerplate_wanted"))
        con.register(params, REGISTERED["wanted_boilerplate" if params == "boilerplate_rows" else params]())
        con.execute(load_sql(name), [False] if "$1" in load_sql(name) else [])
        assert con.execute("SELECT chunk_id FROM wanted_boilerplate").fetchall() == [("d1:0",)]
        return
    if isinstance(params, str) and params in REGISTERED:
        con.register(params, REGISTERED[params]())
        for stmt in statements(name):
            code = "\n".join(line for line in stmt.splitlines() if not line.startswith("--"))
            con.execute(code, [2, 1]) if "$1" in code else con.execute(code)
        return
    for stmt in statements(name):
        con.execute(stmt, params) if params is not None else con.execute(stmt)


@pytest.mark.parametrize("name", [n for n in ALL_SQL if in_schema(n)])
def test_sql_file_runs_on_a_delta_layers_own_tables(delta, name):
    """A file shared by both forms of catalog (``{schema}`` tables) writes a delta layer's own
    tables too; its whole-catalog form runs in test_sql_file_runs."""
    params = PARAMS[name]
    if params == "run":
        insert_run(delta, {"run_id": "r", "started": dt.datetime.now(), "status": "completed", "roots": ["/r"]})
        assert delta.execute("SELECT count(*) FROM layer.runs WHERE run_id = 'r'").fetchone()[0] == 1
        return
    if params == "arrow":
        for table in ("new_documents", "new_sections", "new_chunks"):
            src = table.removeprefix("new_")
            delta.register(table, delta.execute(f"SELECT * FROM {src} LIMIT 0").fetch_arrow_table())
    for stmt in statements(name, "layer"):
        delta.execute(stmt, params) if isinstance(params, list) else delta.execute(stmt)
    if name == "set_meta":
        assert delta.execute("SELECT value FROM layer.meta WHERE key = 'k'").fetchone() == ("v",)


def test_sql_schema_is_one_of_the_two(con):
    with pytest.raises(ValueError, match="no schema"):
        load_sql("set_meta", "main; DROP TABLE chunks; --")


def test_a_delta_layer_reads_as_the_catalog_it_changes(delta):
    """Moves, touches, replacements and deletes write the layer; its views show the result."""
    con = delta
    layers.rewrite_documents(con, "move", layers.moves_table(MOVED), 2, 1)
    assert con.execute("SELECT path, path_bytes FROM documents").fetchall() == [("/r/b\\xe9.md", b"/r/b\xe9.md")]
    assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1  # the chunk stays in the base
    assert con.execute("SELECT doc_layer, content_layer FROM layer.owners").fetchall() == [(2, 1)]
    layers.delete_documents(con, ["d1"])
    assert con.execute("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks)").fetchone() == (0, 0)


@pytest.mark.parametrize("query, hit", [("2018", True), ("FY2018", True), ("e11000", True), ("gardening", False)])
def test_bm25_finds_numbers_and_codes(con, query, hit):
    from quarry.retrieval.textnorm import bm25_text

    catalog.rebuild_fts(con)
    rows = con.execute(load_sql("bm25_search"), [bm25_text(query), 5]).fetchall()
    assert bool(rows) is hit


def test_hostile_strings_are_bound_not_executed(con):
    catalog.rebuild_fts(con)
    con.execute(load_sql("bm25_search"), ["x'; DROP TABLE chunks; --", 5]).fetchall()
    con.execute(load_sql("hydrate_chunks"), [["') OR 1=1 --"]]).fetchall()
    assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1


def test_a_documents_layout_and_the_runs_that_failed_its_file_since(con):
    assert con.execute(load_sql("document_layout"), ["d1"]).fetchone() == ([0, 120], [2], ["page 3 could not be read"])
    assert con.execute(load_sql("document_chunk_text"), ["d1", 0, 0]).fetchall() == [
        (0, "Document: Title", "error E11000 in FY2018")
    ]
    for run_id, day, path in (("r1", 1, "/r/a.md"), ("r2", 5, "/r/a.md"), ("r3", 6, "/r/other.md")):
        insert_run(
            con,
            {
                "run_id": run_id,
                "started": dt.datetime(2024, 1, day),
                "status": "partial",
                "roots": ["/r"],
                "errors": [{"path": path, "error": f"broken in {run_id}"}],
                "durations": {},
                "settings": {},
            },
        )
    rows = con.execute(load_sql("document_failures"), ["/r/a.md", dt.datetime(2024, 1, 2, 3, 4, 5)]).fetchall()
    assert [(r[0], r[2]) for r in rows] == [("r2", "broken in r2")]
    assert con.execute(load_sql("run_view"), ["r3"]).fetchone()[0] == "r3"
    assert con.execute(load_sql("run_view"), ["nope"]).fetchone() is None


def test_metadata_column_holds_json(con):
    row = con.execute("SELECT metadata FROM documents").fetchone()[0]
    assert json.loads(row) == {}


def test_the_sql_views_join_what_users_ask_for(con):
    for stmt in statements("sql_views"):
        con.execute(stmt)
    row = con.execute("SELECT chunk_id, path, file_type, title, section FROM chunks_full").fetchone()
    assert row == ("d1:0", "/r/a.md", "md", "Title", "Intro")
    assert con.execute("SELECT path, title, n_chunks FROM sections_full").fetchone() == ("/r/a.md", "Intro", 1)


def test_permission_clause_in_the_view_sql_keeps_readers_only(con):
    from quarry.search.filters import Filter, with_filter

    for who, found in ((["group:hr"], 1), (["group:eng"], 0), ([], 0)):
        sql, params = with_filter(load_sql("document_view"), Filter.readable_by(who))
        assert len(con.execute(sql, ["d1", *params]).fetchall()) == found, who
        sql, params = with_filter(load_sql("chunk_view"), Filter.readable_by(who))
        assert len(con.execute(sql, ["d1:0", *params]).fetchall()) == found, who
        sql, params = with_filter(load_sql("status_readable"), Filter.readable_by(who))
        assert con.execute(sql, params).fetchone()[:3] == (found, found, found), who


def test_acl_sources_are_remembered_per_root(con):
    con.execute(load_sql("acl_set_source"), ["/r", "posix", None])
    con.execute(load_sql("acl_set_source"), ["/r", "rules", "/etc/acl.yaml"])
    assert con.execute(load_sql("acl_sources")).fetchall() == [("/r", "rules", "/etc/acl.yaml")]
