"""Read-only snapshots of the committed state."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import duckdb

from quarry.core.errors import QuarryError, StoreCorrupt
from quarry.store import catalog, vectors
from quarry.store.layout import require_pointer
from quarry.store.pointer import DOCTOR_HINT, Pointer, read_pointer


@dataclass
class Snapshot:
    """One committed state: its pointer, a read-only catalog connection, the vector table and
    the search index files of the same generation.

    Safe to share between threads: :attr:`con` is a cursor of the catalog connection per thread
    (one DuckDB connection used by two threads at once can crash the process).
    """

    store: Path
    pointer: Pointer
    connection: duckdb.DuckDBPyConnection
    _table: object = None
    _index: object = None
    users: int = 0  # calls pinned to this snapshot now (quarry.search.query.Index)
    retired: bool = False  # a newer generation replaced it: closed when its last user leaves
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _cursors: list = field(default_factory=list, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _columns: frozenset | None = field(default=None, repr=False)
    private: Path | None = None  # a private copy of the catalog, read while another process held it

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
    def table(self):
        """The LanceDB table at the committed version (opened on first use)."""
        if self._table is None:
            if not self.pointer.vector_table:
                return None
            self._table = vectors.open_for_read(self.store, self.pointer.vector_table, self.pointer.vector_version)
        return self._table

    @property
    def index(self):
        """The :class:`~quarry.retrieval.searchindex.SearchIndex` of this generation.

        Mapped when the snapshot opened; a store committed before index files existed is
        indexed in memory here, once (slow: it reads every vector from LanceDB).
        """
        if self._index is None:
            from quarry.retrieval import searchindex
            logging.getLogger("quarry").warning(
                "%s has no search index files (committed by an older quarry); indexing in memory. "
                "The next `quarry index` run writes them.", self.store)
            stored = partial(vectors.read_in_row_order, self.table) if self.table is not None else None
            arrays, manifest = searchindex.build(self.con, stored, self.pointer.model, self.pointer.dim,
                                               ivf_rows=1 << 62)
            self._index = searchindex.SearchIndex(arrays, manifest)
        return self._index

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
        if self.private is not None:
            shutil.rmtree(self.private.parent, ignore_errors=True)


def _load_index(store: Path, pointer: Pointer):
    from quarry.retrieval import searchindex
    folder = store / searchindex.folder_name(pointer.generation)
    if not searchindex.is_complete(folder):
        return None
    return searchindex.SearchIndex.load(folder)


def open_snapshot(store: Path, attempts: int = 5) -> Snapshot:
    """Open the committed state read-only.

    A writer may commit (and remove the old catalog and index files) between reading CURRENT
    and opening the files it names; then the pointer is read again.
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
        except (duckdb.IOException, duckdb.SerializationException, duckdb.InternalException,
                duckdb.InvalidInputException) as exc:
            last = exc
            time.sleep(0.05 * (attempt + 1))
            continue
        try:
            index = _load_index(store, pointer)
        except (OSError, ValueError) as exc:  # removed while being mapped: a newer commit
            index, last = None, exc
        if index is None and read_pointer(store) != pointer:
            con.close()
            if private is not None:
                shutil.rmtree(private.parent, ignore_errors=True)
            time.sleep(0.05 * (attempt + 1))
            continue
        return Snapshot(store, pointer, con, _index=index, private=private)
    hint = DOCTOR_HINT.format(store=store)
    if missing is not None:
        raise StoreCorrupt(f"{missing}, the catalog CURRENT names, is missing: {hint}")
    if last is not None and not _is_lock_conflict(last):
        raise StoreCorrupt(f"{store / pointer.catalog} cannot be opened ({_first_line(last)}): {hint}")
    raise QuarryError(f"could not open the committed catalog in {store}: {last or 'it keeps changing'}")


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
        return catalog.connect(path, read_only=True, fts=False), None, None
    except duckdb.IOException as exc:
        holder = lock_holder(exc)
        if holder is None:
            raise
    folder = Path(tempfile.mkdtemp(prefix="quarry-catalog-"))
    copy = folder / path.name
    try:
        shutil.copyfile(path, copy)
        con = catalog.connect(copy, read_only=True, fts=False)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    logging.getLogger("quarry").warning(
        "%s is held open read-write by %s; reading a private copy of it. Open catalogs read-only "
        "(duckdb -readonly FILE, or read_only=True) so that quarry and other readers can share them.", path, holder)
    return con, copy, holder


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _is_lock_conflict(exc: BaseException) -> bool:
    return "lock" in str(exc).lower()
