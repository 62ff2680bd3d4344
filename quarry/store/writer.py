"""A write session: everything an index run changes, made visible in one step.

Order of work, and why it is crash-safe:

1. take the writer lock (flock; released by the kernel if the process dies);
2. remove what dead runs left: catalog generations newer than the one CURRENT names (and
   those past the retention, quarry/store/generations.py), and LanceDB versions after the
   committed one (restored back);
3. write the run's changes into a new catalog file of its own: a *delta layer* over the
   committed catalogs, which it attaches read-only (quarry/store/layers.py), while LanceDB gets the
   new rows as new table versions — readers keep using the committed files and check out the
   committed table version, so they see none of it;
4. commit: fold small earlier layers into the new one, or everything into a new base, when
   :func:`quarry.store.layers.plan_merge` says so; write the search index segment of the new layer
   (quarry/retrieval/searchindex.py, quarry/retrieval/deltasegment.py), the run row; checkpoint and
   close the new catalog, then atomically replace CURRENT to name it, its layers and the new table
   version; then tidy (quarry/store/upkeep.py).

The catalog is written through :class:`quarry.store.catalog_writes.CatalogWrites`: a delta layer
(``DeltaCatalog``) or a whole catalog (``BaseCatalog``: a new store's first generation, or one over
a catalog this quarry cannot build on), with the same methods, so this file is the protocol alone.

A kill before step 4's rename leaves the old pointer, hence the old state, intact.

DuckDB's own full-text tables (``match_bm25`` for SQL users, on unless ``QUARRY_DUCKDB_FTS=0``) are
not part of the commit and no commit builds them: one that changed no chunk links the previous
generation's sidecar (:func:`quarry.store.fts.carry`); the first ``match_bm25`` query or ``quarry
maintain`` builds the others (quarry/store/fts.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from quarry.core import faults, paths
from quarry.core.models import DocumentRecord, RunReport
from quarry.store import acl, catalog, journal, layers, upkeep, vectors
from quarry.store.catalog_writes import CatalogWrites, IndexInputs, insert_run, open_catalog, remove_files
from quarry.store.changes import RunChanges
from quarry.store.handle import Store, as_store
from quarry.store.layout import WriterLock, write_pointer
from quarry.store.pointer import Pointer
from quarry.store.upkeep import after_commit, remove_debris

if TYPE_CHECKING:
    from lancedb.table import Table as LanceTable

# insert_run, remove_debris and after_commit live in catalog_writes and upkeep; importable here as before
__all__ = ["CommitInfo", "StoreWriter", "after_commit", "insert_run", "remove_debris"]


@dataclass
class CommitInfo:
    generation: int
    vector_version: int
    seconds: float


class StoreWriter:
    """Holds the lock, the new catalog generation and the vector table of one run."""

    def __init__(self, store: Store | Path, model: str, dim: int, duckdb_fts: bool = False):
        self.store = as_store(store)
        self.folder = self.store.folder
        # carry DuckDB's full-text tables over a commit that changed no chunk (quarry/store/fts.py)
        self.duckdb_fts = duckdb_fts
        self.model = model
        self.dim = dim
        self.lock = WriterLock(self.store)
        self.base: Pointer | None = None
        self._cat: CatalogWrites | None = None  # the new generation's catalog, while open
        self._table: LanceTable | None = None  # the vector table, once open
        self.generation = 0
        self.model_changed = False
        self.dirty = False  # whether chunks changed
        self.fresh_table = True  # the vector table holds no committed rows (new store or new model)
        self.pending: set[str] = set()  # documents added to LanceDB whose catalog write has not finished
        self.run_ids: set[str] = set()  # the runs this session wrote documents for
        self.memory_limit = ""  # DuckDB's own, lifted back at commit (see cap_cache)
        self.changes = RunChanges(dim)  # what this session changed (quarry/store/changes.py)
        self.recount_boilerplate = False  # every chunk's boilerplate flag from scratch (quarry maintain)
        # texts -> vectors of the run's model, for chunks QUARRY_BOILERPLATE=strip changes at commit
        self.embed: Callable[[list[str]], np.ndarray] | None = None

    def open(self) -> StoreWriter:
        self.lock.acquire()
        try:
            self._open()
        except BaseException:
            self._drop_connection()
            self.lock.release()
            raise
        return self

    def _open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.base = remove_debris(self.folder)
        self.generation = (self.base.generation if self.base else 0) + 1
        self._cat = open_catalog(self.folder, self.base, self.generation)
        name = vectors.table_name(self.model, self.dim)
        same_table = self.base is not None and self.base.vector_table == name
        self.model_changed = self.base is not None and bool(self.base.vector_table) and not same_table
        self.fresh_table = not same_table
        self.memory_limit = upkeep.memory_limit(self.con)
        self.cap_cache()
        self._table = vectors.open_for_write(
            self.store, self.model, self.dim, self.base.vector_version if same_table and self.base is not None else 0
        )

    @property
    def catalog(self) -> CatalogWrites:
        """The catalog of the generation being written (from :meth:`open` until the commit or
        :meth:`close`): a delta layer or a whole catalog (quarry/store/catalog_writes.py)."""
        if self._cat is None:
            raise RuntimeError(f"the writer of {self.folder} has no open catalog")
        return self._cat

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The catalog connection of the generation being written (see :attr:`catalog`)."""
        return self.catalog.con

    @property
    def table(self) -> LanceTable:
        """The vector table being written (from :meth:`open` on)."""
        if self._table is None:
            raise RuntimeError(f"the writer of {self.folder} has not opened its vector table")
        return self._table

    @property
    def catalog_path(self) -> Path:
        return self.folder / Pointer.catalog_name(self.generation)

    # --- changes -----------------------------------------------------------------------------

    def lookup_vectors(self, hashes: list[str]) -> dict[str, np.ndarray]:
        """Stored vectors of this model for the given text hashes (none after a model change)."""
        return vectors.lookup_vectors(self.table, hashes)

    def write_documents(self, records: list[DocumentRecord], vecs: dict[str, np.ndarray], run_id: str) -> None:
        """Replace these documents' rows in both stores. Safe to repeat after a failure."""
        if not records:
            return
        self.dirty = True
        doc_ids = [r.doc_id for r in records]
        self.run_ids.add(run_id)
        stored = dict(self.con.execute(catalog.load_sql("stored_documents"), [doc_ids]).fetchall())
        self.changes.note_removed(self.con, sorted(stored))
        vectors.delete_documents(self.table, self._in_table(doc_ids, stored))
        self.pending.update(doc_ids)
        vectors.add_rows(self.table, vectors.rows_table(self.model, self.dim, records, vecs))
        faults.point("after-vectors")
        self.catalog.replace_documents(records, run_id, stored, self.changes.written)
        self.pending.difference_update(doc_ids)
        self.changes.wrote(records, vecs)
        faults.point("after-catalog")

    def _in_table(self, doc_ids: list[str], stored: dict[str, str]) -> list[str]:
        """Those of ``doc_ids`` whose rows the vector table may hold: of the catalog's documents
        (``stored``: doc_id -> the run that wrote it), all when the table carries the committed
        version, else those this session wrote; and those a failed write may have added. A
        LanceDB delete scans every fragment and makes a version even when nothing matches, so
        deleting each batch's new documents cost time growing with the fragments the run had
        added (quadratic over a run)."""
        held = {d for d, run in stored.items() if not self.fresh_table or run in self.run_ids}
        return sorted(held | (self.pending & set(doc_ids)))

    def delete_documents(self, doc_ids: list[str]) -> None:
        if doc_ids:
            self.dirty = True
            self.changes.note_removed(self.con, doc_ids)
            vectors.delete_documents(self.table, doc_ids)
            self.catalog.delete_documents(doc_ids)
            self.changes.deleted(doc_ids)

    def move_documents(self, moves: list[tuple]) -> None:
        """Files that moved with the same bytes, all of a run at once: ``(doc_id, path, root,
        rel_path, mtime, run_id)`` each. One LanceDB update for all of them (its ``path`` column),
        one catalog statement."""
        if not moves:
            return
        table = layers.moves_table(moves)
        roots, moved = self.catalog.moved_chunks(table)
        vectors.move_documents(self.table, moved)
        self.catalog.move_documents(table)
        self.changes.rewrote([m[0] for m in moves], [m[0] for m in moves if roots.get(m[0]) != paths.display(m[2])])

    def move_document(self, doc_id: str, path: str, root: str, rel_path: str, mtime, run_id: str) -> None:
        """One moved file (see :meth:`move_documents`)."""
        self.move_documents([(doc_id, path, root, rel_path, mtime, run_id)])

    def touch_documents(self, items: list[tuple[str, datetime, str]]) -> None:
        """Record new mtimes of unchanged files (bookkeeping only): ``(doc_id, mtime, run_id)`` each."""
        if items:
            self.catalog.touch_documents(layers.touches_table(items))
            self.changes.rewrote(d for d, *_ in items)

    def set_principals(self, by_path: dict[str, tuple[str, ...]], sources: dict | None = None) -> int:
        """Set who may read the documents at these paths where it differs (nothing is re-parsed or
        re-embedded), and remember each root's permission source; returns the documents changed."""
        if sources:
            self.catalog.set_acl_sources(sources)
        changed = acl.apply(self.catalog, by_path)
        self.changes.rewrote(changed)
        return len(changed)

    def set_document_principals(self, by_doc: dict[str, list[str] | tuple[str, ...]]) -> int:
        """Set who may read these documents (by doc_id); returns how many changed."""
        changed = acl.apply_to_documents(self.catalog, by_doc)
        self.changes.rewrote(changed)
        return len(changed)

    # --- commit ------------------------------------------------------------------------------

    def commit(self, run_row: RunReport | dict | None, settings_meta: dict[str, str], finish=None) -> CommitInfo:
        """Make the run visible: merge, search index, run row, checkpoint, then the pointer rename.

        ``finish(seconds)``, when given, is called just before the run row is written with the
        seconds this commit has taken so far and returns the row to write, so that the row can
        hold the commit's own duration and finish time. ``run_row`` None writes no run row (a
        merge by ``quarry maintain``).
        """
        t0 = time.perf_counter()
        self.lift_cache_cap()
        try:
            vectors.compact(self.table)
        except Exception as exc:  # noqa: BLE001 - a slower table is better than a lost run
            logging.getLogger("quarry").warning("LanceDB compaction failed, will retry next run: %s", exc)
        vectors.index_keys(self.table)
        # committed_generation marks a catalog whose commit finished writing it: `quarry doctor`
        # adopts only such a generation when it has to rebuild a lost CURRENT. The vector table and
        # version make the catalog name its whole state, for `quarry rollback`.
        meta = {
            **settings_meta,
            "model": self.model,
            "dim": str(self.dim),
            "committed_generation": str(self.generation),
            "vector_table": self.table.name,
            "vector_version": str(self.table.version),
        }
        if self.base is not None:  # the replaced generation's pointer as it stands now (maintain may have moved it)
            meta["previous_pointer"] = json.dumps(asdict(self.base))
        for key, value in meta.items():
            self.catalog.set_meta(key, value)
        self.changes.update_duplicates(self.catalog)
        if self.changes.update_boilerplate(self.catalog, self.table, self.embed, self.recount_boilerplate):
            self.catalog.set_meta("vector_version", str(self.table.version))
        faults.point("fts")
        self._write_search_index()
        if finish is not None and run_row is not None:
            run_row = finish(time.perf_counter() - t0)
        if run_row is not None:
            insert_run(self.con, run_row)
        journal_rows, claimed = journal.claim(self.store, self.generation)
        journal.merge(self.con, journal_rows, insert_run)
        self.con.execute("CHECKPOINT")
        cat = self.catalog
        cat.con.close()
        self._cat = None
        cat.drop_private()
        pointer = Pointer(
            generation=self.generation,
            catalog=self.catalog_path.name,
            vector_table=self.table.name,
            vector_version=self.table.version,
            model=self.model,
            dim=self.dim,
            committed_at=time.time(),
            layers=cat.chain,
        )
        faults.point("before-commit")
        write_pointer(self.store, pointer)  # <- the commit point
        faults.point("after-commit")
        journal.forget(claimed)
        self._after_commit(pointer)
        return CommitInfo(self.generation, pointer.vector_version, time.perf_counter() - t0)

    def _write_search_index(self, force_base: bool = False) -> None:
        """Merge layers as :func:`quarry.store.layers.plan_merge` says, then build ``index-<gen>/``:
        the segment of this generation's layer (a whole index for a base)."""
        self._cat = self.catalog.merge_layers(force=force_base or self.model_changed)
        faults.point("after-merge")
        read = self._vectors_in_row_order if self._table is not None else None
        inputs = IndexInputs(self.model, self.dim, read, self.changes)
        self.catalog.write_index(inputs)

    def merge_all(self) -> None:
        """Make this (otherwise empty) generation a new base of every live row: ``quarry maintain``."""
        self.dirty = True
        self._cat = self.catalog.rebased()

    def _vectors_in_row_order(self, row_ids: pa.Array) -> np.ndarray:
        """The build's vectors (its largest part), read once the catalog's parts are written: DuckDB
        then holds the blocks its queries read (the whole catalog); the loading cap evicts them
        before the vectors are read."""
        self.cap_cache()
        try:
            return vectors.read_in_row_order(self.table, row_ids)
        finally:
            self.lift_cache_cap()

    def cap_cache(self) -> None:
        """Hold DuckDB's cache to :data:`quarry.store.upkeep.LOAD_MEMORY_LIMIT` while batches load."""
        upkeep.cap_cache(self.con)

    def lift_cache_cap(self) -> None:
        """Give DuckDB back the memory limit it opened with (:func:`quarry.store.upkeep.lift_cache_cap`)."""
        upkeep.lift_cache_cap(self.con, self.memory_limit)

    def _after_commit(self, pointer: Pointer) -> None:
        after_commit(self.store, pointer, self.table)
        # chunks unchanged (moves, touches, permissions, a merge): the previous full-text tables
        # still hold. Nothing is built here: the first match_bm25 query or quarry maintain does.
        if self.duckdb_fts and self.base is not None and not self.changes.content_changed and not self.model_changed:
            from quarry.store import fts

            fts.carry(self.folder, pointer.generation, self.base.generation)

    def _drop_connection(self) -> None:
        if self._cat is not None:
            self._cat.close()
            self._cat = None

    def close(self) -> None:
        """Abandon uncommitted work (if any) and release the lock."""
        try:
            if self._cat is not None:
                self._drop_connection()
                remove_files(self.catalog_path)
        finally:
            self.lock.release()

    def __enter__(self) -> StoreWriter:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
