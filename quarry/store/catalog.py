"""The DuckDB catalog: documents, sections, chunks, runs, meta.

quarry searches its own memory-mapped BM25 files (quarry/retrieval), so it needs DuckDB's FTS
extension (the ``duckdb-ext-fts`` wheel, a dependency of the base install) only to build
DuckDB's index: for the tests, which use ``match_bm25`` as an independent reference, and for SQL
users, in a sidecar file per generation (quarry/store/fts.py, docs/export.md).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import logging
import re
import shutil
import tempfile
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Protocol

import duckdb
import pyarrow as pa

from quarry.core import paths
from quarry.core.errors import QuarryError
from quarry.core.models import DocumentRecord
from quarry.core.sqlfiles import load_sql, statements
from quarry.retrieval.corpus.signals import CHUNK_COLUMNS
from quarry.retrieval.textnorm import bm25_text

SCHEMA_VERSION = "1"
TABLES = ("documents", "sections", "chunks", "runs", "meta", "acl_roots")


class WritingCatalog(Protocol):
    """What the steps that update rows of the catalog a run writes (permissions, duplicate
    clusters, boilerplate flags) ask of it; quarry/store/catalog_writes.py implements it for a
    whole catalog and for a delta layer, so that those steps never ask which one they write."""

    con: duckdb.DuckDBPyConnection

    def update_documents(self, name: str) -> list[str]: ...

    def own_chunks(self, check: str, copy: str) -> list[str]: ...

    def statements_name(self, name: str) -> str: ...

    def set_meta(self, key: str, value: str) -> None: ...


def table_schema(table: str) -> pa.Schema:
    """The Arrow schema of a catalog table, read from ``sql/schema.sql`` applied to an empty
    in-memory catalog: the SQL is the one definition of every table, so the row builders below
    can never disagree with it about a column's name, order or type."""
    if table not in TABLES:
        raise ValueError(f"no catalog table {table!r}; tables: {', '.join(TABLES)}")
    return _table_schemas()[table]


@cache
def _table_schemas() -> dict[str, pa.Schema]:
    """Every table's schema from one in-memory catalog (a run forked from a warm process asks for
    them anew, and one catalog per table cost it 65 ms, one for all of them 15 ms)."""
    con = duckdb.connect(":memory:")
    try:
        for stmt in statements("schema"):
            con.execute(stmt)
        return {table: con.table(table).limit(0).fetch_arrow_table().schema for table in TABLES}
    finally:
        con.close()


def rows_table(table: str, rows: list[dict]) -> pa.Table:
    """``rows`` (dicts keyed by column) as an Arrow table of ``table``'s schema; a row builder
    whose keys drift from the schema fails here instead of writing NULLs."""
    schema = table_schema(table)
    if rows and list(rows[0]) != schema.names:
        raise QuarryError(f"rows for {table} have columns {list(rows[0])}, the schema has {schema.names}")
    return pa.Table.from_pylist(rows, schema=schema)


@cache
def fts_extension_path() -> str:
    """Path of the FTS extension shipped by the ``duckdb-ext-fts`` wheel.

    DuckDB cannot download extensions here, so quarry loads the file directly.
    """
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        raise QuarryError(
            "DuckDB's FTS extension is missing (match_bm25 needs it): "
            "pip install 'duckdb-ext-fts==1.4.4.*' (a dependency of quarry)"
        )
    version = duckdb.__version__
    for location in spec.submodule_search_locations:
        found = glob.glob(f"{location}/extensions/v{version}/*/fts.duckdb_extension")
        if found:
            return found[0]
    raise QuarryError(f"duckdb-ext-fts holds no FTS extension for DuckDB {version}: install the matching version")


def connect(path: Path, read_only: bool, fts: bool = False) -> duckdb.DuckDBPyConnection:
    """Open a catalog file, with DuckDB's FTS extension loaded when ``fts`` is True.

    Nothing quarry runs needs the extension but :func:`rebuild_fts` (which loads it itself);
    loading it takes about half a second.
    """
    con = duckdb.connect(str(path), read_only=read_only)
    if fts:
        con.execute(f"LOAD '{fts_extension_path()}'")
    return con


def create(path: Path) -> duckdb.DuckDBPyConnection:
    """Create an empty catalog at ``path``."""
    con = connect(path, read_only=False)
    for stmt in statements("schema"):
        con.execute(stmt)
    set_meta(con, "schema_version", SCHEMA_VERSION)
    return con


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Bring a catalog copied from an older generation up to this schema: its ALTER statements, and
    the tables it lacks (every statement of ``sql/schema.sql`` is idempotent)."""
    for stmt in statements("schema"):
        code = "\n".join(line for line in stmt.splitlines() if not line.startswith("--"))
        if code.startswith(("ALTER TABLE", "CREATE TABLE IF NOT EXISTS")):
            con.execute(code)


def get_meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute(load_sql("get_meta")).fetchall())


def set_meta(con: duckdb.DuckDBPyConnection, key: str, value: str) -> None:
    con.execute(load_sql("set_meta"), [key, value])


def utc_timestamp(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC).replace(tzinfo=None)


def documents_table(records: list[DocumentRecord], run_id: str) -> pa.Table:
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [
        {
            "doc_id": r.doc_id,
            "path": paths.display(r.file.path),
            "root": paths.display(r.file.root),
            "rel_path": paths.display(r.file.rel_path),
            "file_type": r.file.file_type,
            "size": r.file.size,
            "mtime": utc_timestamp(r.file.mtime),
            "sha256": r.file.sha256,
            "title": r.title,
            "summary": r.summary,
            "n_pages": r.n_pages,
            "n_sections": len(r.sections),
            "n_chunks": len(r.chunks),
            "metadata": json.dumps(r.metadata, ensure_ascii=False),
            "indexed_at": now,
            "run_id": run_id,
            "path_bytes": paths.raw_bytes(r.file.path),
            "principals": None,  # set by the run's permissions step (quarry/store/acl.py) before it commits
            "page_offsets": list(r.page_offsets) or None,
            "ocr_page_numbers": list(r.ocr_page_numbers) or None,
            "warnings": list(r.warnings) or None,
            **_document_signals(r),
        }
        for r in records
    ]
    return rows_table("documents", rows)


def _document_signals(r: DocumentRecord) -> dict:
    """The corpus signal columns of a documents row; the duplicate cluster is the commit's
    (quarry/store/dedup.py)."""
    get = r.signals.get
    return {
        "content_hash": get("content_hash"),
        "minhash": get("minhash"),
        "lsh_bands": get("lsh_bands"),
        "dup_cluster": None,
        "dup_of": None,
        "dup_similarity": None,
        "lang": get("lang"),
        "pii_total": get("pii_total"),
    }


def sections_table(records: list[DocumentRecord], page_of) -> pa.Table:
    rows = []
    for r in records:
        for s in r.sections:
            pages = page_of(r, s.start, s.end)
            rows.append(
                {
                    "doc_id": r.doc_id,
                    "section_index": s.index,
                    "title": s.title,
                    "level": s.level,
                    "start_char": s.start,
                    "end_char": s.end,
                    "page_start": pages[0],
                    "page_end": pages[1],
                    "summary": s.summary,
                }
            )
    return rows_table("sections", rows)


def chunks_table(records: list[DocumentRecord]) -> pa.Table:
    rows = [
        {
            "chunk_id": c.chunk_id,
            "doc_id": c.doc_id,
            "section_index": c.section_index,
            "chunk_index": c.chunk_index,
            "start_char": c.start,
            "end_char": c.end,
            "page_start": c.page_start,
            "page_end": c.page_end,
            "header": c.header,
            "text": c.text,
            "text_hash": c.text_hash,
            "n_tokens": c.n_tokens,
            "search_text": bm25_text(f"{c.header}\n{c.text}"),
            **{name: c.signals.get(name) for name in CHUNK_COLUMNS},
        }
        for r in records
        for c in r.chunks
    ]
    return rows_table("chunks", rows)


def _section_pages(record: DocumentRecord, start: int, end: int) -> tuple[int | None, int | None]:
    pages = [c.page_start for c in record.chunks if c.start < end and c.end > start and c.page_start]
    pages += [c.page_end for c in record.chunks if c.start < end and c.end > start and c.page_end]
    return (min(pages), max(pages)) if pages else (None, None)


def replace_documents(con: duckdb.DuckDBPyConnection, records: list[DocumentRecord], run_id: str, stored=None) -> None:
    """Insert ``records``, replacing any earlier rows of the same documents, in one transaction.

    ``stored``: those of the documents the catalog holds, when the caller knows (only they are
    deleted first: each delete scans the chunks table, a cost growing with the catalog).
    """
    if not records:
        return
    con.begin()
    try:
        doc_ids = [r.doc_id for r in records]
        delete_documents(con, doc_ids if stored is None else [d for d in doc_ids if d in stored], in_transaction=True)
        insert_records(con, records, run_id)
        con.commit()
    except BaseException:
        con.rollback()
        raise


def insert_records(
    con: duckdb.DuckDBPyConnection, records: list[DocumentRecord], run_id: str, schema: str = "main"
) -> None:
    """Insert ``records``' rows (``sql/insert_documents.sql``, which reads them as ``new_documents``,
    ``new_sections`` and ``new_chunks``) into the tables of ``schema``: ``main``, a whole catalog's,
    or ``layer``, a delta layer's own; inside the caller's transaction."""
    names = {
        "new_documents": documents_table(records, run_id),
        "new_sections": sections_table(records, _section_pages),
        "new_chunks": chunks_table(records),
    }
    try:
        for name, table in names.items():
            con.register(name, table)
        for stmt in statements("insert_documents", schema):
            con.execute(stmt)
    finally:
        for name in names:
            try:
                con.unregister(name)
            except duckdb.Error:
                pass


def delete_documents(con: duckdb.DuckDBPyConnection, doc_ids: list[str], in_transaction: bool = False) -> None:
    """Delete documents with their sections and chunks."""
    if not doc_ids:
        return
    if not in_transaction:
        con.begin()
    try:
        for stmt in statements("delete_documents"):
            con.execute(stmt, [doc_ids])
        if not in_transaction:
            con.commit()
    except BaseException:
        if not in_transaction:
            con.rollback()
        raise


def rebuild_fts(con: duckdb.DuckDBPyConnection) -> None:
    """Build DuckDB's own FTS index over ``chunks.search_text`` (``match_bm25`` in plain SQL).

    quarry searches its index files instead (quarry/retrieval); this index is the independent BM25
    reference the tests compare against, and what the full-text sidecar of a generation holds
    (quarry/store/fts.py). Raises QuarryError when the extension is not installed.
    """
    con.execute(f"LOAD '{fts_extension_path()}'")
    con.execute("SET enable_progress_bar = false")  # DuckDB would draw its own bar over the run's
    con.execute(load_sql("fts_rebuild"))


def drop_fts(con: duckdb.DuckDBPyConnection) -> None:
    """Drop DuckDB's FTS index (its schema of tables and macros), without needing the extension."""
    con.execute("DROP SCHEMA IF EXISTS fts_main_chunks CASCADE")


def has_fts(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'fts_main_chunks'").fetchone()
    return bool(row and row[0])


def lock_holder(exc: BaseException) -> str | None:
    """The process DuckDB names as holding a file's lock (``PID 5072 (/usr/bin/python3)``), or None."""
    m = re.search(r"Conflicting lock is held in (.*?) \(PID (\d+)\)", str(exc))
    return f"PID {m.group(2)} ({m.group(1)})" if m else None


def connect_read_only(path: Path) -> tuple[duckdb.DuckDBPyConnection, Path | None, str | None]:
    """Open the catalog ``path`` read-only; returns the connection and, when another process held
    the file read-write (a SQL client opened it without ``-readonly``), the private copy opened
    instead and that process (``PID 5072 (/usr/bin/python3)``); else ``None, None``.

    DuckDB lets many read-only connections share a file but none beside a read-write one. A
    committed catalog never changes, so a copy of it is the same state: quarry keeps answering
    and says who holds the file.
    """
    try:
        return connect(path, read_only=True, fts=False), None, None
    except duckdb.IOException as exc:
        holder = lock_holder(exc)
        if holder is None:
            raise
    folder = Path(tempfile.mkdtemp(prefix="quarry-catalog-"))
    copy = folder / path.name
    try:
        shutil.copyfile(path, copy)
        con = connect(copy, read_only=True, fts=False)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    logging.getLogger("quarry").warning(
        "%s is held open read-write by %s; reading a private copy of it. Open catalogs read-only "
        "(duckdb -readonly FILE, or read_only=True) so that quarry and other readers can share them.",
        path,
        holder,
    )
    return con, copy, holder
