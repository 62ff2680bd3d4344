"""A write session's chores around the commit protocol (quarry/store/writer.py): what a dead run
left, DuckDB's cache while batches load, and the tidying after the pointer moved.

They change nothing a reader sees: debris is what ``CURRENT`` does not name, the cache is memory,
and tidying removes only what no kept generation reads. ``quarry maintain`` (quarry/store/maintain.py)
is the store's scheduled upkeep; these run inside every write session.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from quarry.store import generations, vectors
from quarry.store.handle import Store, as_store
from quarry.store.pointer import Pointer, read_pointer

if TYPE_CHECKING:
    from lancedb.table import Table as LanceTable

__all__ = ["LOAD_MEMORY_LIMIT", "after_commit", "cap_cache", "lift_cache_cap", "memory_limit", "remove_debris"]

LOAD_MEMORY_LIMIT = "256MB"  # DuckDB's cache while batches load (see cap_cache)


def remove_debris(store: Path) -> Pointer | None:
    """Delete catalog generations and index folders that CURRENT does not name and the retention
    does not keep (left by a killed run, or past ``QUARRY_KEEP_GENERATIONS``); returns the pointer.
    The caller holds the writer lock."""
    base = read_pointer(store)
    generations.remove_unkept(store, base.generation if base else None)
    return base


def memory_limit(con: duckdb.DuckDBPyConnection) -> str:
    """DuckDB's memory limit as the connection opened with it (to give back: :func:`lift_cache_cap`)."""
    setting = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert setting is not None  # a setting: one row
    return str(setting[0])


def cap_cache(con: duckdb.DuckDBPyConnection) -> None:
    """Hold DuckDB's cache to :data:`LOAD_MEMORY_LIMIT` (evicting blocks already on disk).

    DuckDB keeps every block it has read or written cached up to 80% of RAM, and loading reads and
    writes the whole catalog: the cache grew ~0.7 KB per chunk loaded (110 MB over 160K chunks).
    A cap evicts blocks already on disk; the commit lifts it (its queries read all)."""
    con.execute(f"SET memory_limit = '{LOAD_MEMORY_LIMIT}'")


def lift_cache_cap(con: duckdb.DuckDBPyConnection, limit: str) -> None:
    """Give DuckDB back the memory limit it opened with (``limit``, :func:`memory_limit`). Not
    ``RESET memory_limit``: in DuckDB 1.4.4 that shows the default again but leaves the lower limit
    in force (a 1M-chunk commit then failed with an out-of-memory error at 244 MiB)."""
    con.execute(f"SET memory_limit = '{limit}'")


def after_commit(store: Store | Path, pointer: Pointer, table: LanceTable | None = None) -> None:
    """Tidy after the pointer moved: generations past the retention, LanceDB versions no kept
    generation names (older than an hour, once there are many: :func:`quarry.store.vectors.prune_due`),
    vector tables no kept generation names. Best-effort: the next commit tries again."""
    store = as_store(store)
    generations.remove_unkept(store.folder, pointer.generation)
    try:
        versions = generations.kept_versions(store.folder, pointer)
        if table is not None and vectors.prune_due(table):
            vectors.prune(table, keep_versions=versions.get(table.name, set()))
        vectors.drop_unreferenced(store, set(versions))
    except Exception as exc:  # noqa: BLE001 - tidying is retried by the next run; the commit has landed
        logging.getLogger("quarry").info("tidying the vector table after commit failed (retried next run): %s", exc)
