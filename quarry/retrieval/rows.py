"""What a search result shows, as memory-mapped Arrow files in row order.

Reading result rows from the catalog costs a DuckDB query per search (tens of milliseconds at
100K chunks: the joins scan whole tables); ``Table.take`` on a memory-mapped Arrow file costs
microseconds. ``rows.arrow`` holds the chunk columns in row order (chunk_id order) and is
rebuilt when chunks change; ``docs.arrow`` holds path, title and file type by doc_id and is
rewritten at every commit, because moving a file changes its path but no chunk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from quarry.core.sqlfiles import load_sql

ROWS = "rows.arrow"
DOCS = "docs.arrow"
COLUMNS = ("chunk_id", "doc_id", "path", "title", "section", "header", "text", "page_start", "page_end",
           "chunk_index", "section_index", "file_type", "start_char", "end_char")


ROWS_BATCH = 65_536  # rows written to rows.arrow at a time


def build_rows(con) -> pa.Table:
    """The chunk columns in row order."""
    return con.execute(load_sql("index_rows")).fetch_arrow_table()


def write_rows(con, path: Path, batch_rows: int = ROWS_BATCH) -> tuple[pa.Array, pa.ChunkedArray]:
    """Write :func:`build_rows`'s table to ``path`` a record batch at a time; returns its chunk_id
    and doc_id columns. What the commit holds is then those two columns (about 50 MB at 1M
    chunks), not the whole table (0.8 GB: every chunk's text twice, DuckDB's result and Arrow's)."""
    reader = con.execute(load_sql("index_rows")).fetch_record_batch(batch_rows)
    ids, docs = [], []
    with open(path, "wb") as fh:
        with pa.ipc.new_file(fh, reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
                ids.append(batch.column("chunk_id"))
                docs.append(batch.column("doc_id"))
        fh.flush()
        os.fsync(fh.fileno())
    field = reader.schema.field("chunk_id").type, reader.schema.field("doc_id").type
    return pa.chunked_array(ids, type=field[0]).combine_chunks(), pa.chunked_array(docs, type=field[1])


def build_docs(con) -> pa.Table:
    """The document columns, by doc_id."""
    return con.execute(load_sql("index_documents")).fetch_arrow_table()


def save(table: pa.Table, fh) -> None:
    """Uncompressed Arrow IPC, so a reader can map it without copying."""
    with pa.ipc.new_file(fh, table.schema) as writer:
        writer.write_table(table)


def load(path: Path) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()


class ResultRows:
    """Row ids -> result fields. Reads single values (no ``Table.take``: importing
    ``pyarrow.compute`` alone costs a cold process 0.3 s)."""

    def __init__(self, rows: pa.Table, docs: pa.Table):
        self.rows = rows
        self.docs = docs
        self._doc_pos = None
        self._columns = None
        self._doc_columns = None

    def chunk_ids(self, rows) -> list[str]:
        column = self.rows.column("chunk_id")
        return [column[int(r)].as_py() for r in rows]

    def fields(self, rows) -> list[dict]:
        """One dict of :data:`COLUMNS` per row id, in the order given."""
        if self._doc_pos is None:  # doc_id -> position in docs.arrow, once per snapshot
            self._doc_pos = {d: i for i, d in enumerate(self.docs.column("doc_id").to_pylist())}
        if self._columns is None:  # once per snapshot
            self._columns = {n: _single(self.rows.column(n)) for n in self.rows.column_names}
            self._doc_columns = {n: _single(self.docs.column(n)) for n in ("path", "title", "file_type")}
        out = []
        for r in rows:
            item = {n: c[int(r)].as_py() for n, c in self._columns.items()}
            pos = self._doc_pos.get(item["doc_id"])
            for n, c in self._doc_columns.items():
                item[n] = c[pos].as_py() if pos is not None else ""
            out.append(item)
        return out


def _single(column: pa.ChunkedArray):
    """The column's one array (indexing it skips the chunk search), or the chunked column as it
    is: combining several chunks would copy a mapped file into memory."""
    return column.chunk(0) if column.num_chunks == 1 else column
