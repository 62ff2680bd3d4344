"""Read-only snapshots of the committed state."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from quarry.errors import QuarryError
from quarry.store import catalog, vectors
from quarry.store.layout import Pointer, require_pointer


@dataclass
class Snapshot:
    """One committed state: its pointer, a read-only catalog connection and the vector table."""

    store: Path
    pointer: Pointer
    con: duckdb.DuckDBPyConnection
    _table: object = None

    @property
    def table(self):
        """The LanceDB table at the committed version (opened on first use)."""
        if self._table is None:
            if not self.pointer.vector_table:
                return None
            self._table = vectors.open_for_read(self.store, self.pointer.vector_table, self.pointer.vector_version)
        return self._table

    def close(self) -> None:
        self.con.close()


def open_snapshot(store: Path, attempts: int = 5) -> Snapshot:
    """Open the committed state read-only.

    A writer may commit (and remove the old catalog) between reading CURRENT and opening the
    file it names; then the pointer is read again.
    """
    last: Exception | None = None
    for attempt in range(attempts):
        pointer = require_pointer(store)
        path = store / pointer.catalog
        if not path.exists():
            time.sleep(0.05 * (attempt + 1))
            continue
        try:
            return Snapshot(store, pointer, catalog.connect(path, read_only=True))
        except duckdb.IOException as exc:
            last = exc
            time.sleep(0.05 * (attempt + 1))
    raise QuarryError(f"could not open the committed catalog in {store}: {last or 'it keeps changing'}")
