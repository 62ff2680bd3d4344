"""Read-only snapshots of the committed state."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from quarry.core import gcpause, paths, plans
from quarry.core.errors import QuarryError, StoreCorrupt
from quarry.core.plans import CatalogDoc
from quarry.core.sqlfiles import load_sql
from quarry.store import layers, vectors
from quarry.store.catalog import connect_read_only, lock_holder  # noqa: F401 - read from here too
from quarry.store.layout import require_pointer
from quarry.store.pointer import DOCTOR_HINT, Pointer, read_pointer

if TYPE_CHECKING:
    from quarry.retrieval.searchindex import SearchIndex


@dataclass
class Snapshot:
    """One committed state: its pointer, a read-only catalog connection (the generation's file with
    the earlier layers it builds on attached, quarry/store/layers.py), the vector table and the
    search index of the same generation.

    Safe to share between threads: :attr:`con` is a cursor of the catalog connection per thread
    (one DuckDB connection used by two threads at once can crash the process). Attached layers are
    the connection's, seen by every cursor; temporary views (``chunk_rows``) are made per cursor.
    """

    store: Path
    pointer: Pointer
    connection: duckdb.DuckDBPyConnection
    _table: object = None
    _index: SearchIndex | None = None
    users: int = 0  # calls pinned to this snapshot now (quarry.search.query.Index)
    retired: bool = False  # a newer generation replaced it: closed when its last user leaves
    private: list[Path] = field(default_factory=list)  # folders of private copies of catalog files another process held
    chain: tuple[int, ...] = ()  # the catalog's layers, base first, this generation last
    _in_memory: bool = False
    catalog_only: bool = False  # opened without its search index (open_snapshot(search_index=False))
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _cursors: list = field(default_factory=list, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _columns: frozenset | None = field(default=None, repr=False)
    _chunk_columns: frozenset | None = field(default=None, repr=False)
    # what readers derive once from this committed state (search collapse's candidates): it never changes
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor on the catalog (made on first use, closed with the snapshot)."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._guard:
                cursor = self.connection.cursor()
                self._cursors.append(cursor)
            self._local.cursor = cursor
        return cursor

    @property
    def document_columns(self) -> frozenset:
        """The columns of this catalog's ``documents`` (a catalog committed by an older quarry lacks
        the newer ones until a run copies it)."""
        if self._columns is None:
            self._columns = frozenset(r[0] for r in self.con.execute("DESCRIBE documents").fetchall())
        return self._columns

    @property
    def has_principals(self) -> bool:
        """Whether the catalog's documents carry principals (a catalog committed before they did
        has none, and every document in it is public)."""
        return "principals" in self.document_columns

    @property
    def has_signals(self) -> bool:
        """Whether the catalog carries the corpus signals (duplicate clusters, docs/corpus.md)."""
        return "dup_cluster" in self.document_columns

    @property
    def has_boilerplate(self) -> bool:
        """Whether the catalog's chunks carry the boilerplate flag (``chunks.boilerplate``)."""
        if self._chunk_columns is None:
            self._chunk_columns = frozenset(r[0] for r in self.con.execute("DESCRIBE chunks").fetchall())
        return "boilerplate" in self._chunk_columns

    @property
    def table(self):
        """The LanceDB table at the committed version (opened on first use)."""
        if self._table is None:
            if not self.pointer.vector_table:
                return None
            self._table = vectors.open_for_read(self.store, self.pointer.vector_table, self.pointer.vector_version)
        return self._table

    @property
    def index(self) -> SearchIndex:
        """The :class:`~quarry.retrieval.searchindex.SearchIndex` of this generation.

        Mapped when the snapshot opened; a store committed before index files existed is
        indexed in memory here, once (slow: it reads every vector from LanceDB).
        """
        if self._index is None:
            if self.catalog_only:
                raise RuntimeError(f"this snapshot of {self.store} was opened without its search index")
            from quarry.retrieval import searchindex

            logging.getLogger("quarry").warning(
                "%s has no search index files (committed by an older quarry); indexing in memory. "
                "The next `quarry index` run writes them.",
                self.store,
            )
            stored = partial(vectors.read_in_row_order, self.table) if self.table is not None else None
            arrays, manifest = searchindex.build(
                self.con, stored, self.pointer.model, self.pointer.dim, ivf_rows=1 << 62
            )
            self._index = searchindex.SearchIndex.from_arrays(arrays, manifest)
            self._in_memory = True
        return self._index

    def chunk_rows(self) -> str:
        """The name of a temporary view of the live chunks with their search index row ids
        (``sql/filter_rows.sql`` reads it), created on first use."""
        if not getattr(self._local, "rows_view", False):
            segments = self.index.row_offsets()
            if len(segments) <= 1:  # one segment of every live row, numbered over the catalog's chunks
                chain: tuple[int, ...] = (self.pointer.generation,)
                offsets: dict[int, int] = {self.pointer.generation: 0}
            elif [g for g, _ in segments] == list(self.chain):
                # the segments are the layers: every generation is known (none built in memory)
                chain, offsets = self.chain, {g: start for g, start in segments if g is not None}
            else:
                raise StoreCorrupt(
                    f"the search index of generation {self.pointer.generation} in {self.store} does not "
                    f"match its catalog's layers: {DOCTOR_HINT.format(store=self.store)}"
                )
            self.con.execute(layers.chunk_rows_sql(chain, offsets, self.con))
            self._local.rows_view = True
        return "chunk_rows"

    @property
    def index_manifest(self) -> dict | None:
        """The manifest of this generation's mapped index files; None when there are none
        (a store from before index files). Builds nothing, unlike :attr:`index`."""
        return self._index.manifest if self._index is not None else None

    def close(self) -> None:
        with self._guard:
            for cursor in self._cursors:
                try:
                    cursor.close()
                except duckdb.Error:
                    pass
            self._cursors.clear()
            self.connection.close()
        for folder in self.private:
            shutil.rmtree(folder, ignore_errors=True)


def _load_index(store: Path, pointer: Pointer) -> SearchIndex | None:
    from quarry.retrieval import searchindex

    folder = store / searchindex.folder_name(pointer.generation)
    if searchindex.read_manifest(folder) is None:
        return None
    return searchindex.SearchIndex.load(folder)


def open_snapshot(store: Path, attempts: int = 5, search_index: bool = True) -> Snapshot:
    """Open the committed state read-only.

    A writer may commit (and remove the old catalog and index files) between reading CURRENT
    and opening the files it names; then the pointer is read again. ``search_index=False`` opens
    the catalog alone (what a run's plan reads), and the snapshot's :attr:`Snapshot.index` then
    refuses rather than building one.
    """
    last: Exception | None = None
    missing = None
    for attempt in range(attempts):
        pointer = require_pointer(store)
        path = store / pointer.catalog
        if not path.exists():
            missing = path
            time.sleep(0.05 * (attempt + 1))
            continue
        missing = None
        try:
            con, private, _ = connect_read_only(path)
        except (
            duckdb.IOException,
            duckdb.SerializationException,
            duckdb.InternalException,
            duckdb.InvalidInputException,
        ) as exc:
            last = exc
            time.sleep(0.05 * (attempt + 1))
            continue
        folders = [private.parent] if private is not None else []
        try:
            chain = pointer.layers or layers.chain_of(con, pointer.generation)
            folders += layers.attach(con, store, chain[:-1])
        except (FileNotFoundError, duckdb.Error) as exc:  # a layer removed by a newer commit, or damaged
            con.close()
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
            if read_pointer(store) != pointer:
                time.sleep(0.05 * (attempt + 1))
                continue
            raise StoreCorrupt(
                f"{path} cannot be opened ({_first_line(exc)}): {DOCTOR_HINT.format(store=store)}"
            ) from exc
        if not search_index:
            return Snapshot(store, pointer, con, private=folders, chain=tuple(chain), catalog_only=True)
        try:
            index = _load_index(store, pointer)
        except (OSError, ValueError) as exc:  # removed while being mapped: a newer commit
            index, last = None, exc
        if index is None and read_pointer(store) != pointer:
            con.close()
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
            time.sleep(0.05 * (attempt + 1))
            continue
        return Snapshot(store, pointer, con, _index=index, private=folders, chain=tuple(chain))
    hint = DOCTOR_HINT.format(store=store)
    if missing is not None:
        raise StoreCorrupt(f"{missing}, the catalog CURRENT names, is missing: {hint}")
    if last is not None and not _is_lock_conflict(last):
        raise StoreCorrupt(f"{store / pointer.catalog} cannot be opened ({_first_line(last)}): {hint}")
    raise QuarryError(f"could not open the committed catalog in {store}: {last or 'it keeps changing'}")


def committed_catalog(store: Path) -> tuple[list[CatalogDoc], dict[str, str]]:
    """The committed documents and meta of a store (empty for a new store): what a run plans
    against (quarry/ingest/plan.py). Each document's ``trusted`` and ``trust_before`` follow
    :data:`~quarry.core.plans.RACY_SECONDS` (``sql/plan_documents.sql``)."""
    if read_pointer(store) is None:
        return [], {}
    with gcpause.paused():  # a tuple per document, no cycles: quarry/core/gcpause.py
        snap = open_snapshot(store, search_index=False)
        try:
            columns = {r[0] for r in snap.con.execute("DESCRIBE documents").fetchall()}
            sql = load_sql("plan_documents")
            if "path_bytes" not in columns:  # a catalog committed before the column existed
                sql = sql.replace("d.path_bytes,", "NULL AS path_bytes,")
            # through Arrow, column by column: a third of fetchall's time at 50,000 documents
            table = snap.con.execute(sql, [plans.RACY_SECONDS]).fetch_arrow_table()
            rows = zip(*(column.to_pylist() for column in table.columns))
            meta = dict(snap.con.execute(load_sql("get_meta")).fetchall())
        finally:
            snap.close()
        docs = [
            CatalogDoc(
                r[0],
                r[1] if r[6] is None else paths.from_catalog(r[1], r[6]),
                r[3],
                r[4] / 1e6,
                r[5],
                bool(r[7]),
                r[8] / 1e6 if r[8] is not None else 0.0,
            )
            for r in rows
        ]
    return docs, meta


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _is_lock_conflict(exc: BaseException) -> bool:
    return "lock" in str(exc).lower()
