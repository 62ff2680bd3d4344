"""What a search result shows, as memory-mapped Arrow files in row order.

Reading result rows from the catalog costs a DuckDB query per search (tens of milliseconds at
100K chunks: the joins scan whole tables); ``Table.take`` on a memory-mapped Arrow file costs
microseconds. ``rows.arrow`` holds the chunk columns in row order (chunk_id order) and is
rebuilt when chunks change; ``docs.arrow`` holds path, title and file type by doc_id and is
rewritten at every commit, because moving a file changes its path but no chunk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from quarry.core.sqlfiles import load_sql

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

ROWS = "rows.arrow"
DOCS = "docs.arrow"
COLUMNS = (
    "chunk_id",
    "doc_id",
    "path",
    "title",
    "section",
    "header",
    "text",
    "page_start",
    "page_end",
    "chunk_index",
    "section_index",
    "file_type",
    "start_char",
    "end_char",
)


ROWS_BATCH = 65_536  # rows written to rows.arrow at a time

# row ids as a search hands them over: a list, or a numpy array of integers
RowIds = Sequence[int] | npt.NDArray[np.integer[Any]]


def build_rows(con: DuckDBPyConnection) -> pa.Table:
    """The chunk columns in row order."""
    return con.execute(load_sql("index_rows")).fetch_arrow_table()


def write_rows(con: DuckDBPyConnection, path: Path, batch_rows: int = ROWS_BATCH) -> tuple[pa.Array, pa.ChunkedArray]:
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


def build_docs(con: DuckDBPyConnection) -> pa.Table:
    """The document columns, by doc_id."""
    return con.execute(load_sql("index_documents")).fetch_arrow_table()


def save(table: pa.Table, fh: BinaryIO) -> None:
    """Uncompressed Arrow IPC, so a reader can map it without copying."""
    with pa.ipc.new_file(fh, table.schema) as writer:
        writer.write_table(table)


def load(path: Path) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()


def _single(column: pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The column's one array (indexing it skips the chunk search), or the chunked column as it
    is: combining several chunks would copy a mapped file into memory."""
    return column.chunk(0) if column.num_chunks == 1 else column


class SegmentedRows:
    """Result fields of a generation of several segments (quarry/retrieval/segmented.py).

    ``parts``: per segment, its ``rows.arrow`` and ``docs.arrow`` tables and ``cards.row_doc``
    (each chunk row's document, its place in the same segment's ``docs.arrow``). A document's row
    may have moved to a newer segment since (a moved file changes its path, not its chunks):
    ``deleted_docs`` names the document rows no longer live, and those chunks find their document
    by doc_id among the live documents of the later segments.
    """

    def __init__(
        self, parts: list[tuple[pa.Table, pa.Table, npt.ArrayLike | None]], deleted_docs: npt.ArrayLike | None = None
    ):
        self.tables = [p[0] for p in parts]
        self.doc_tables = [p[1] for p in parts]
        self.row_docs = [p[2] for p in parts]
        self.offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([t.num_rows for t in self.tables], out=self.offsets[1:])
        self.doc_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([t.num_rows for t in self.doc_tables], out=self.doc_offsets[1:])
        self.deleted_docs = np.asarray(deleted_docs if deleted_docs is not None else [], dtype=np.int64)
        self._dead_docs = np.zeros(int(self.doc_offsets[-1]) + 1, dtype=bool)  # the last: "unknown" (-1)
        self._dead_docs[self.deleted_docs] = True
        self._dead_docs[-1] = True
        self._columns: dict[int, dict[str, Any]] = {}
        self._doc_columns: dict[int, dict[str, Any]] = {}
        self._moved: dict[str, int] | None = None
        self._relocated: dict[int, int] = {}  # a deleted document row -> the live row of its document

    def _locate(self, row: int, offsets: np.ndarray) -> tuple[int, int]:
        s = int(np.searchsorted(offsets, row, side="right")) - 1
        return s, int(row - offsets[s])

    def _cols(self, s: int) -> dict[str, Any]:
        cols = self._columns.get(s)
        if cols is None:
            cols = self._columns[s] = {n: _single(self.tables[s].column(n)) for n in self.tables[s].column_names}
        return cols

    def _doc_cols(self, s: int) -> dict[str, Any]:
        cols = self._doc_columns.get(s)
        if cols is None:
            cols = self._doc_columns[s] = {
                n: _single(self.doc_tables[s].column(n)) for n in ("doc_id", "path", "title", "file_type")
            }
        return cols

    def chunk_ids(self, rows: Iterable[int]) -> list[str]:
        out = []
        for r in rows:
            s, i = self._locate(int(r), self.offsets)
            out.append(self._cols(s)["chunk_id"][i].as_py())
        return out

    def _by_doc_id(self) -> dict[str, int]:
        """doc_id -> live global document row, over every segment but the first (a document row
        moves only forward: the first segment's rows are where nothing moved)."""
        if self._moved is None:
            dead = set(self.deleted_docs.tolist())
            moved: dict[str, int] = {}
            for s in range(1, len(self.doc_tables)):
                for i, doc_id in enumerate(self._doc_cols(s)["doc_id"].to_pylist()):
                    g = int(self.doc_offsets[s]) + i
                    if g not in dead:
                        moved[doc_id] = g
            self._moved = moved
        return self._moved

    def doc_rows(self, rows: npt.ArrayLike) -> list[int]:
        """The global document row (in docs.arrow order, segment after segment) of each chunk row;
        -1 when the document is unknown."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return []
        seg = np.searchsorted(self.offsets, rows, side="right") - 1
        out = np.full(len(rows), -1, dtype=np.int64)
        for s in np.unique(seg).tolist():
            where = np.flatnonzero(seg == s)
            if self.row_docs[s] is not None:
                local = np.asarray(self.row_docs[s])[rows[where] - self.offsets[s]].astype(np.int64)
                out[where] = np.where(local >= 0, local + self.doc_offsets[s], -1)
        stale = self._dead_docs[out]  # -1 reads the last entry, True
        for i in np.flatnonzero(stale).tolist():  # moved documents: found by doc_id in a later segment
            g = int(out[i])
            found = self._relocated.get(g) if g >= 0 else None
            if found is None:
                s = int(seg[i])
                found = self._find_doc(self._cols(s)["doc_id"][int(rows[i] - self.offsets[s])].as_py())
                if g >= 0:  # a document row no longer live: where its document lives now, kept
                    self._relocated[g] = found
            out[i] = found
        result: list[int] = out.tolist()
        return result

    def doc_position(self, doc_id: str) -> int:
        """The live global document row of ``doc_id``; -1 when none."""
        return self._find_doc(doc_id)

    def _find_doc(self, doc_id: str) -> int:
        g = self._by_doc_id().get(doc_id)
        if g is not None:
            return g
        ids = self._doc_cols(0)["doc_id"] if self.doc_tables else None
        if ids is None:
            return -1
        lo, hi = 0, len(ids)
        while lo < hi:  # docs.arrow is in doc_id order
            mid = (lo + hi) // 2
            if ids[mid].as_py() < doc_id:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(ids) and ids[lo].as_py() == doc_id and not _contains(self.deleted_docs, lo) else -1

    def fields(self, rows: RowIds) -> list[dict[str, Any]]:
        """One dict of :data:`COLUMNS` per row id, in the order given."""
        out = []
        docs = self.doc_rows(rows)
        segs: npt.ArrayLike = (
            np.searchsorted(self.offsets, np.asarray(rows, dtype=np.int64), side="right") - 1 if len(rows) else []
        )
        for r, g, s in zip(rows, docs, np.asarray(segs).tolist()):
            i = int(r) - int(self.offsets[s])
            item = {n: c[i].as_py() for n, c in self._cols(s).items()}
            if g >= 0:
                ds, di = self._locate(g, self.doc_offsets)
                for n in ("path", "title", "file_type"):
                    item[n] = self._doc_cols(ds)[n][di].as_py()
            else:
                for n in ("path", "title", "file_type"):
                    item[n] = ""
            out.append(item)
        return out


def _contains(sorted_ids: np.ndarray, value: int) -> bool:
    pos = int(np.searchsorted(sorted_ids, value))
    return pos < len(sorted_ids) and int(sorted_ids[pos]) == value
