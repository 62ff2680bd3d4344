"""A write session: everything an index run changes, made visible in one step.

Order of work, and why it is crash-safe:

1. take the writer lock (flock; released by the kernel if the process dies);
2. remove what dead runs left: catalog generations newer than the one CURRENT names (and
   those past the retention, quarry/store/generations.py), and LanceDB versions after the
   committed one (restored back);
3. copy the committed catalog to a new generation file and apply the run's changes there,
   while LanceDB gets the new rows as new table versions — readers keep using the committed
   catalog file and check out the committed table version, so they see none of it;
4. commit: build the search index files, write the run row, checkpoint and close the new catalog, then
   atomically replace CURRENT to name it and the new table version.

A kill before step 4's rename leaves the old pointer, hence the old state, intact.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import numpy as np

from quarry.core import faults

from quarry.core import paths
from quarry.core.errors import QuarryError, StoreCorrupt
from quarry.core.models import DocumentRecord, RunReport
from quarry.store import acl, catalog, journal, vectors
from quarry.store import generations
from quarry.store.layout import WriterLock, write_pointer
from quarry.store.pointer import DOCTOR_HINT, Pointer, read_pointer


LOAD_MEMORY_LIMIT = "256MB"  # DuckDB's cache while batches load (see StoreWriter._open)


@dataclass
class CommitInfo:
    generation: int
    vector_version: int
    seconds: float


class StoreWriter:
    """Holds the lock, the new catalog generation and the vector table of one run."""

    def __init__(self, store: Path, model: str, dim: int, duckdb_fts: bool = False):
        self.store = store
        self.duckdb_fts = duckdb_fts  # commit DuckDB's own FTS index with the catalog (docs/export.md)
        self.model = model
        self.dim = dim
        self.lock = WriterLock(store)
        self.base: Pointer | None = None
        self.con = None
        self.table = None
        self.generation = 0
        self.model_changed = False
        self.dirty = False  # whether chunks changed, so that the BM25 index must be rebuilt
        self.fresh_table = True  # the vector table holds no committed rows (new store or new model)
        self.pending: set[str] = set()  # documents added to LanceDB whose catalog write has not finished
        self.run_ids: set[str] = set()  # the runs this session wrote documents for
        self.memory_limit = ""  # DuckDB's own, lifted back at commit (see cap_cache)

    def open(self) -> StoreWriter:
        self.lock.acquire()
        try:
            self._open()
        except BaseException:
            self.lock.release()
            raise
        return self

    def _open(self) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        self.base = remove_debris(self.store)
        self.generation = (self.base.generation if self.base else 0) + 1
        path = self.catalog_path
        if self.base:
            source = self.store / self.base.catalog
            hint = DOCTOR_HINT.format(store=self.store)
            if not source.is_file():
                raise StoreCorrupt(f"{source}, the catalog CURRENT names, is missing: {hint}")
            try:
                shutil.copyfile(source, path)
            except OSError as exc:  # a full disk, a read-only store: the committed state is untouched
                path.unlink(missing_ok=True)
                raise QuarryError(f"cannot write {path}: {exc.strerror or exc}; the committed index is "
                                  "unchanged: free space or fix the store's permissions, then run again") from exc
            try:
                self.con = catalog.connect(path, read_only=False)
                catalog.migrate(self.con)
            except duckdb.Error as exc:
                path.unlink(missing_ok=True)
                raise StoreCorrupt(f"{source}, the committed catalog, cannot be opened "
                                   f"({str(exc).strip().splitlines()[0][:200]}): {hint}") from exc
        else:
            self.con = catalog.create(path)
        name = vectors.table_name(self.model, self.dim)
        same_table = self.base is not None and self.base.vector_table == name
        self.model_changed = self.base is not None and bool(self.base.vector_table) and not same_table
        self.fresh_table = not same_table
        # DuckDB keeps every block it has read or written cached up to 80% of RAM, and loading reads
        # and writes the whole catalog: the cache grew ~0.7 KB per chunk loaded (110 MB over 160K
        # chunks). A cap evicts blocks already on disk; commit lifts it (its queries read all).
        self.memory_limit = self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        self.cap_cache()
        self.table = vectors.open_for_write(self.store, self.model, self.dim, self.base.vector_version if same_table else 0)

    @property
    def catalog_path(self) -> Path:
        return self.store / Pointer.catalog_name(self.generation)

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
        vectors.delete_documents(self.table, self._in_table(doc_ids, stored))
        self.pending.update(doc_ids)
        vectors.add_rows(self.table, vectors.rows_table(self.model, self.dim, records, vecs))
        faults.point("after-vectors")
        catalog.replace_documents(self.con, records, run_id, stored=stored)
        self.pending.difference_update(doc_ids)
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
            vectors.delete_documents(self.table, doc_ids)
            catalog.delete_documents(self.con, doc_ids)

    def move_document(self, doc_id: str, path: str, root: str, rel_path: str, mtime, run_id: str) -> None:
        vectors.move_document(self.table, doc_id, paths.display(path))
        self.con.execute(catalog.load_sql("move_document"), [doc_id, paths.display(path), paths.display(root),
                                                             paths.display(rel_path), mtime, run_id,
                                                             paths.raw_bytes(path)])

    def touch_documents(self, items: list[tuple[str, object]]) -> None:
        """Record new mtimes of unchanged files (bookkeeping only)."""
        if items:
            self.con.executemany(catalog.load_sql("touch_document"), [[doc_id, mtime] for doc_id, mtime in items])

    def set_principals(self, by_path: dict[str, tuple[str, ...]], sources: dict | None = None) -> int:
        """Set who may read the documents at these paths where it differs (nothing is re-parsed or
        re-embedded), and remember each root's permission source; returns the documents changed."""
        if sources:
            acl.set_sources(self.con, sources)
        return acl.apply(self.con, by_path)

    def set_document_principals(self, by_doc: dict[str, list[str] | tuple[str, ...]]) -> int:
        """Set who may read these documents (by doc_id); returns how many changed."""
        return acl.apply_to_documents(self.con, by_doc)

    # --- commit ------------------------------------------------------------------------------

    def commit(self, run_row: RunReport | dict, settings_meta: dict[str, str], finish=None) -> CommitInfo:
        """Make the run visible: search index, run row, checkpoint, then the pointer rename.

        ``finish(seconds)``, when given, is called just before the run row is written with the
        seconds this commit has taken so far and returns the row to write, so that the row can
        hold the commit's own duration and finish time.
        """
        t0 = time.perf_counter()
        self.lift_cache_cap()
        try:
            vectors.compact(self.table)
        except Exception as exc:  # a slower table is better than a lost run
            logging.getLogger("quarry").warning("LanceDB compaction failed, will retry next run: %s", exc)
        # committed_generation marks a catalog whose commit finished writing it: `quarry doctor`
        # adopts only such a generation when it has to rebuild a lost CURRENT. The vector table and
        # version make the catalog name its whole state, for `quarry rollback`.
        meta = {**settings_meta, "model": self.model, "dim": str(self.dim), "committed_generation": str(self.generation),
                "vector_table": self.table.name, "vector_version": str(self.table.version)}
        if self.base is not None:  # the replaced generation's pointer as it stands now (maintain may have moved it)
            meta["previous_pointer"] = json.dumps(asdict(self.base))
        for key, value in meta.items():
            catalog.set_meta(self.con, key, value)
        faults.point("fts")
        self._write_search_index()
        if finish is not None:
            run_row = finish(time.perf_counter() - t0)
        insert_run(self.con, run_row)
        journal_rows, claimed = journal.claim(self.store, self.generation)
        journal.merge(self.con, journal_rows, insert_run)
        self.con.execute("CHECKPOINT")
        self.con.close()
        self.con = None
        pointer = Pointer(
            generation=self.generation,
            catalog=self.catalog_path.name,
            vector_table=self.table.name,
            vector_version=self.table.version,
            model=self.model,
            dim=self.dim,
            committed_at=time.time(),
        )
        faults.point("before-commit")
        write_pointer(self.store, pointer)  # <- the commit point
        faults.point("after-commit")
        journal.forget(claimed)
        self._after_commit(pointer)
        return CommitInfo(self.generation, pointer.vector_version, time.perf_counter() - t0)

    def _write_search_index(self) -> None:
        """Build ``index-<gen>/`` (BM25 + vectors, see quarry/retrieval), or link the previous
        generation's files when no chunk changed (moves and touches leave chunks as they were)."""
        from quarry.retrieval import searchindex
        catalog.sync_fts(self.con, self.duckdb_fts)  # dropped unless asked for: search never uses it
        folder = self.store / searchindex.folder_name(self.generation)
        base = self.store / searchindex.folder_name(self.base.generation) if self.base else None
        if not self.dirty and not self.model_changed and base is not None and searchindex.is_complete(base):
            searchindex.link(base, folder, self.con)
            return
        stored = self._vectors_in_row_order if self.table is not None else None
        manifest = searchindex.build_into(folder, self.con, stored, self.model, self.dim)
        logging.getLogger("quarry").info(
            "search index: %d chunks, %d terms, IVF %s, built in %.1f s", manifest["rows"],
            manifest["bm25"]["terms"], manifest["dense"]["ivf"] or "off", manifest["build_seconds"])

    def _vectors_in_row_order(self, row_ids) -> np.ndarray:
        """The build's vectors (its largest part), read once the catalog's parts are written: DuckDB
        then holds the blocks its queries read (the whole catalog); the loading cap evicts them
        before the vectors are read."""
        self.cap_cache()
        try:
            return vectors.read_in_row_order(self.table, row_ids)
        finally:
            self.lift_cache_cap()

    def cap_cache(self) -> None:
        """Hold DuckDB's cache to :data:`LOAD_MEMORY_LIMIT` (evicting blocks already on disk)."""
        self.con.execute(f"SET memory_limit = '{LOAD_MEMORY_LIMIT}'")

    def lift_cache_cap(self) -> None:
        """Give DuckDB back the memory limit it opened with. Not ``RESET memory_limit``: in DuckDB
        1.4.4 that shows the default again but leaves the lower limit in force (a 1M-chunk commit
        then failed with an out-of-memory error at 244 MiB)."""
        self.con.execute(f"SET memory_limit = '{self.memory_limit}'")

    def _after_commit(self, pointer: Pointer) -> None:
        after_commit(self.store, pointer, self.table)

    def close(self) -> None:
        """Abandon uncommitted work (if any) and release the lock."""
        try:
            if self.con is not None:
                try:
                    self.con.close()
                except Exception:  # a full or read-only disk: the run's own error says so
                    pass
                self.con = None
                try:
                    self.catalog_path.unlink(missing_ok=True)
                    Path(str(self.catalog_path) + ".wal").unlink(missing_ok=True)
                except OSError:  # left for the next run's stale-generation sweep
                    pass
        finally:
            self.lock.release()

    def __enter__(self) -> StoreWriter:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def remove_debris(store: Path) -> Pointer | None:
    """Delete catalog generations and index folders that CURRENT does not name and the retention
    does not keep (left by a killed run, or past ``QUARRY_KEEP_GENERATIONS``); returns the pointer.
    The caller holds the writer lock."""
    base = read_pointer(store)
    generations.remove_unkept(store, base.generation if base else None)
    return base


def after_commit(store: Path, pointer: Pointer, table=None) -> None:
    """Tidy after the pointer moved: generations past the retention, LanceDB versions no kept
    generation names (older than an hour), vector tables no kept generation names. Best-effort:
    the next commit tries again."""
    generations.remove_unkept(store, pointer.generation)
    try:
        versions = generations.kept_versions(store, pointer)
        if table is not None:
            vectors.prune(table, keep_versions=versions.get(table.name, set()))
        vectors.drop_unreferenced(store, set(versions))
    except Exception as exc:
        logging.getLogger("quarry").info("tidying the vector table after commit failed (retried next run): %s", exc)


def insert_run(con, run_row: RunReport | dict) -> None:
    """Insert one ``runs`` row; a dict may leave fields out (they take :class:`RunReport`'s defaults)."""
    import pyarrow as pa

    report = run_row if isinstance(run_row, RunReport) else RunReport.from_row(run_row)
    catalog.migrate(con)  # a catalog from before the newer run columns gains them
    con.register("new_run", pa.Table.from_pylist([report.to_row()]))
    try:
        con.execute(catalog.load_sql("insert_run"))
    finally:
        con.unregister("new_run")
