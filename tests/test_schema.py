"""One source per table: sql/schema.sql defines the catalog tables and ``vectors.schema`` the
LanceDB table; the row builders derive from them, and the column lists in docs/ARCHITECTURE.md
and docs/export.md are checked against the real tables here."""

from __future__ import annotations

import re

import duckdb
import pyarrow as pa
import pytest
from conftest import ROOT

from quarry.core.models import Chunk, DocumentRecord, FileInfo, Section
from quarry.core.sqlfiles import load_sql, statements
from quarry.store import catalog, vectors


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect(":memory:")
    for stmt in statements("schema"):
        con.execute(stmt)
    yield con
    con.close()


def described(con, table: str) -> list[tuple[str, str, bool]]:
    """``(column, DuckDB type, nullable)`` of a table, in order."""
    return [(name, kind, null == "YES") for name, kind, null, *_ in con.execute(f"DESCRIBE {table}").fetchall()]


def strip_parens(text: str) -> str:
    """``text`` without its parenthesised asides (nested ones included)."""
    out, depth = [], 0
    for ch in text:
        depth += ch == "("
        if not depth:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)


def architecture_tables() -> dict[str, list[str]]:
    """Key and columns of each catalog table, as docs/ARCHITECTURE.md lists them."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text[text.index("### Catalog tables") :]
    section = section[: section.index("\n### ", 5)]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        table, key, columns = cells
        keys = [k.strip(" ()") for k in re.findall(r"`([^`]+)`", key)[0].split(",")]  # `k` or `(a, b)`
        out[table.strip("`")] = keys + re.findall(r"`([a-z_0-9]+)`", strip_parens(columns))
    return out


def test_builders_use_the_schema_of_the_sql(con):
    for table in ("documents", "sections", "chunks", "runs", "meta"):
        names = [c for c, _, _ in described(con, table)]
        assert catalog.table_schema(table).names == names, table
    with pytest.raises(ValueError, match="no catalog table"):
        catalog.table_schema("chunks; DROP TABLE documents")


def test_rows_built_from_a_record_insert_into_the_real_tables(con):
    info = FileInfo(path="/r/a.md", root="/r", rel_path="a.md", file_type="md", size=3, mtime=0.0, sha256="s")
    chunk = Chunk(
        chunk_id="d:0",
        doc_id="d",
        section_index=0,
        chunk_index=0,
        start=0,
        end=3,
        page_start=None,
        page_end=None,
        header="h",
        text="abc",
        text_hash="t",
        n_tokens=2,
    )
    record = DocumentRecord(
        doc_id="d",
        file=info,
        title="A",
        summary="",
        n_pages=None,
        metadata={},
        sections=[Section(index=0, title="A", level=1, start=0, end=3)],
        chunks=[chunk],
    )
    con.execute("BEGIN")
    try:
        for table, rows in (
            ("documents", catalog.documents_table([record], "run")),
            ("sections", catalog.sections_table([record], lambda r, a, b: (None, None))),
            ("chunks", catalog.chunks_table([record])),
        ):
            con.register("new_rows", rows)
            con.execute(f"INSERT INTO {table} SELECT * FROM new_rows")  # by position: order must agree
            con.unregister("new_rows")
        assert con.execute("SELECT count(*) FROM chunks JOIN documents USING (doc_id)").fetchone() == (1,)
    finally:
        con.execute("ROLLBACK")


def test_a_drifted_row_builder_fails_loudly():
    with pytest.raises(Exception, match="the schema has"):
        catalog.rows_table("sections", [{"doc_id": "d", "section_index": 0}])


def test_architecture_lists_every_catalog_column(con):
    documented = architecture_tables()
    for table in ("documents", "sections", "chunks", "runs"):
        assert documented[table] == [c for c, _, _ in described(con, table)], table


def test_architecture_lists_the_vector_columns():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text[text.index("### Vector table (LanceDB)") :]
    first = section.split("\n\n")[1]
    listed = re.findall(r"`([a-z_]+)`", strip_parens(first.split(". ")[0]))
    assert listed == vectors.schema("m", 4).names


def export_doc_columns() -> dict[str, list[tuple[str, str]]]:
    """``(column, type)`` per exported table, as docs/export.md lists them."""
    text = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    out = {}
    for table in ("documents", "sections", "chunks"):
        section = text[text.index(f"\n### {table}\n") :]
        section = section[: section.index("\n### ", 5)]
        rows = re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", section, re.M)
        out[table] = [(m.group(1), m.group(2).strip()) for m in rows]
    return out


def _base_type(t: pa.DataType) -> str:
    return "list" if pa.types.is_list(t) else str(t).split("[")[0]


@pytest.mark.parametrize("table", ["documents", "sections", "chunks"])
def test_export_docs_name_every_column_and_its_type(con, table):
    from quarry.search.export import with_filter

    sql, _ = with_filter(load_sql(f"export_{table}"), None)
    lead = [None, None] if table == "chunks" else [True]
    schema = con.execute(sql, lead).fetch_arrow_table().schema
    documented = export_doc_columns()[table]
    if table == "chunks":
        assert documented[-1][0] == "vector" and documented[-1][1].startswith("fixed_size_list<float32>")
        documented = documented[:-1]
    assert [name for name, _ in documented] == schema.names
    for (name, kind), field in zip(documented, schema):
        assert re.split(r"[ ,(]", kind)[0] == _base_type(field.type), (table, name, kind, field.type)
