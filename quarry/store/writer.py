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
   (quarry/retrieval/searchindex.py), the run row; checkpoint and close the new catalog, then
   atomically replace CURRENT to name it, its layers and the new table version.

A kill before step 4's rename leaves the old pointer, hence the old state, intact.

A new store's first generation is a whole catalog (a *base*); so is a generation written over a
catalog an older quarry wrote whose columns or index files this one cannot build on: those copy
the committed catalog, as every commit used to.

DuckDB's own full-text tables (``match_bm25`` for SQL users, on unless ``QUARRY_DUCKDB_FTS=0``) are
not part of the commit and no commit builds them: one that changed no chunk links the previous
generation's sidecar (:func:`quarry.store.fts.carry`); the first ``match_bm25`` query or ``quarry
maintain`` builds the others (quarry/store/fts.py).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from quarry.core import faults, paths
from quarry.core.errors import QuarryError, StoreCorrupt
from quarry.core.models import DocumentRecord, RunReport
from quarry.store import acl, boilerplate, catalog, dedup, generations, journal, layers, vectors
from quarry.store.handle import Store, as_store
from quarry.store.layout import WriterLock, write_pointer
from quarry.store.pointer import DOCTOR_HINT, Pointer, read_pointer

if TYPE_CHECKING:
    from lancedb.table import Table as LanceTable

LOAD_MEMORY_LIMIT = "256MB"  # DuckDB's cache while batches load (see StoreWriter._open)
RUN_VECTORS_BYTES = 256 << 20  # vectors of the run's chunks kept for its index segment (beyond: read from LanceDB)
# A commit counts the BM25 terms of the rows it deletes (StoreWriter._deleted_terms) up to this
# many rows a segment, reading their texts this many at a time; a larger deletion is left to the
# readers, which count deleted rows in a term's column as before.
COUNT_DELETED_MAX = 50_000
COUNT_BATCH = 5_000


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
        self.duckdb_fts = (
            duckdb_fts  # carry DuckDB's full-text tables over a commit that changed no chunk (quarry/store/fts.py)
        )
        self.model = model
        self.dim = dim
        self.lock = WriterLock(self.store)
        self.base: Pointer | None = None
        self._con: duckdb.DuckDBPyConnection | None = None  # the new generation's catalog, while open
        self._table: LanceTable | None = None  # the vector table, once open
        self.generation = 0
        self.model_changed = False
        self.dirty = False  # whether chunks changed
        self.fresh_table = True  # the vector table holds no committed rows (new store or new model)
        self.pending: set[str] = set()  # documents added to LanceDB whose catalog write has not finished
        self.run_ids: set[str] = set()  # the runs this session wrote documents for
        self.memory_limit = ""  # DuckDB's own, lifted back at commit (see cap_cache)
        self.delta = False  # writing a delta layer (else a whole catalog, a base)
        self.chain: tuple[int, ...] = ()  # the layers of the generation written, itself last
        self.prev_chain: tuple[int, ...] = ()
        self.written: set[str] = set()  # documents whose rows this layer holds (a retried batch replaces them)
        self.content_changed: set[str] = set()  # documents whose sections and chunks this run replaced or deleted
        self.row_changed: set[str] = set()  # documents whose documents row this run replaced, moved or deleted
        self.run_vectors: dict[str, np.ndarray] | None = {}  # chunk_id -> vector of this run's chunks
        self.private: list[Path] = []  # private copies of layers another process held read-write
        self.merged: list[int] | None = []  # what the commit merged (None: everything, a new base)
        # line hash -> documents holding it that this run deleted or replaced (boilerplate)
        self.removed_lines: collections.Counter = collections.Counter()
        self.removed_docs = 0
        # documents whose lines count differently now: content replaced or deleted, moved, re-clustered
        # (not touches or permission changes, which change no line's holders)
        self.line_changed: set[str] = set()
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
        self.chain = (self.generation,)
        if self.base:
            self._open_over(self.base)
        else:
            self._con = catalog.create(self.catalog_path)
        name = vectors.table_name(self.model, self.dim)
        same_table = self.base is not None and self.base.vector_table == name
        self.model_changed = self.base is not None and bool(self.base.vector_table) and not same_table
        self.fresh_table = not same_table
        # DuckDB keeps every block it has read or written cached up to 80% of RAM, and loading reads
        # and writes the whole catalog: the cache grew ~0.7 KB per chunk loaded (110 MB over 160K
        # chunks). A cap evicts blocks already on disk; commit lifts it (its queries read all).
        setting = self.con.execute("SELECT current_setting('memory_limit')").fetchone()
        assert setting is not None  # a setting: one row
        self.memory_limit = setting[0]
        self.cap_cache()
        self._table = vectors.open_for_write(
            self.store, self.model, self.dim, self.base.vector_version if same_table and self.base is not None else 0
        )

    def _open_over(self, base: Pointer) -> None:
        """Open a delta layer over the committed generation ``base`` (or a whole copy of it when
        this quarry cannot build on it: see the module docstring)."""
        from quarry.retrieval import searchindex

        source = self.folder / base.catalog
        hint = DOCTOR_HINT.format(store=self.folder)
        if not source.is_file():
            raise StoreCorrupt(f"{source}, the catalog CURRENT names, is missing: {hint}")
        folder = self.folder / searchindex.folder_name(base.generation)
        # a delta needs the committed generation's segments to be its catalog's layers
        delta = searchindex.is_complete(folder) and tuple(searchindex.segment_generations(folder)) == (
            base.layers or (base.generation,)
        )
        try:
            self._con, self.chain, self.private, self.delta = layers.open_over(
                self.folder, base.generation, base.layers or None, self.generation, delta=delta
            )
        except (OSError, duckdb.IOException) as exc:  # a full disk, a read-only store: the committed state is untouched
            self._remove_files()
            if isinstance(exc, FileNotFoundError) or not _is_write_error(exc):
                raise StoreCorrupt(
                    f"{source}, the committed catalog, cannot be opened "
                    f"({str(exc).strip().splitlines()[0][:200]}): {hint}"
                ) from exc
            raise _unwritable(self.catalog_path, exc) from exc
        except duckdb.Error as exc:
            self._remove_files()
            raise StoreCorrupt(
                f"{source}, the committed catalog, cannot be opened ({str(exc).strip().splitlines()[0][:200]}): {hint}"
            ) from exc
        self.prev_chain = self.chain[:-1] if self.delta else (base.generation,)
        if not self.delta:
            self.merged = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The catalog connection of the generation being written (from :meth:`open` until the
        commit or :meth:`close`)."""
        if self._con is None:
            raise RuntimeError(f"the writer of {self.folder} has no open catalog")
        return self._con

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
        self._note_removed(sorted(stored))
        vectors.delete_documents(self.table, self._in_table(doc_ids, stored))
        self.pending.update(doc_ids)
        vectors.add_rows(self.table, vectors.rows_table(self.model, self.dim, records, vecs))
        faults.point("after-vectors")
        if self.delta:
            layers.replace_documents(self.con, records, run_id, self.generation, self.written)
        else:
            catalog.replace_documents(self.con, records, run_id, stored=stored)
        self.pending.difference_update(doc_ids)
        self.written.update(doc_ids)
        self.content_changed.update(doc_ids)
        self.row_changed.update(doc_ids)
        self.line_changed.update(doc_ids)
        self._keep_vectors(records, vecs)
        faults.point("after-catalog")

    def _keep_vectors(self, records: list[DocumentRecord], vecs: dict[str, np.ndarray]) -> None:
        """Hold the run's vectors for its index segment, up to :data:`RUN_VECTORS_BYTES` (a bigger
        run reads them back from LanceDB at commit, as a whole build does)."""
        if self.run_vectors is None:
            return
        for r in records:
            for c in r.chunks:
                self.run_vectors[c.chunk_id] = vecs[c.text_hash]
        if len(self.run_vectors) * max(1, self.dim) * 4 > RUN_VECTORS_BYTES:
            self.run_vectors = None

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
            self._note_removed(doc_ids)
            vectors.delete_documents(self.table, doc_ids)
            if self.delta:
                layers.delete_documents(self.con, doc_ids)
            else:
                catalog.delete_documents(self.con, doc_ids)
            self.written.difference_update(doc_ids)
            self.content_changed.update(doc_ids)
            self.row_changed.update(doc_ids)
            self.line_changed.update(doc_ids)

    def _note_removed(self, doc_ids: list[str]) -> None:
        """Remember the lines of documents about to be deleted or replaced: their holders drop, and
        the commit checks whether that flips them (quarry/store/boilerplate.py)."""
        if doc_ids:
            self.removed_docs += len(doc_ids)
            self.removed_lines.update(
                dict(self.con.execute(catalog.load_sql("boilerplate_lines"), [doc_ids]).fetchall())
            )

    def move_documents(self, moves: list[tuple]) -> None:
        """Files that moved with the same bytes, all of a run at once: ``(doc_id, path, root,
        rel_path, mtime, run_id)`` each. One LanceDB update for all of them (its ``path`` column),
        one catalog statement."""
        if not moves:
            return
        table = layers.moves_table(moves)
        roots = dict(self.con.execute(catalog.load_sql("document_roots"), [[m[0] for m in moves]]).fetchall())
        self.con.register("moved_paths", table.select(["doc_id", "path"]))
        try:
            moved = self.con.execute(catalog.load_sql("moved_chunks")).fetch_arrow_table()
        finally:
            self.con.unregister("moved_paths")
        vectors.move_documents(self.table, moved)
        if self.delta:
            layers.rewrite_documents(self.con, "move", table, self.generation, self.prev_chain[0])
        else:
            _classic_rewrite(self.con, "move_documents", "moved_documents", table)
        self.row_changed.update(m[0] for m in moves)
        self.line_changed.update(m[0] for m in moves if roots.get(m[0]) != paths.display(m[2]))

    def move_document(self, doc_id: str, path: str, root: str, rel_path: str, mtime, run_id: str) -> None:
        """One moved file (see :meth:`move_documents`)."""
        self.move_documents([(doc_id, path, root, rel_path, mtime, run_id)])

    def touch_documents(self, items: list[tuple[str, datetime, str]]) -> None:
        """Record new mtimes of unchanged files (bookkeeping only): ``(doc_id, mtime, run_id)`` each."""
        if not items:
            return
        table = layers.touches_table(items)
        if self.delta:
            layers.rewrite_documents(self.con, "touch", table, self.generation, self.prev_chain[0])
        else:
            _classic_rewrite(self.con, "touch_documents", "touched_documents", table)
        self.row_changed.update(d for d, *_ in items)

    def set_principals(self, by_path: dict[str, tuple[str, ...]], sources: dict | None = None) -> int:
        """Set who may read the documents at these paths where it differs (nothing is re-parsed or
        re-embedded), and remember each root's permission source; returns the documents changed."""
        if sources:
            acl.set_sources(self.con, sources, delta=self.delta)
        changed = acl.apply(self.con, by_path, self._acl_layer())
        self.row_changed.update(changed)
        return len(changed)

    def set_document_principals(self, by_doc: dict[str, list[str] | tuple[str, ...]]) -> int:
        """Set who may read these documents (by doc_id); returns how many changed."""
        changed = acl.apply_to_documents(self.con, by_doc, self._acl_layer())
        self.row_changed.update(changed)
        return len(changed)

    def _acl_layer(self) -> tuple[int, int] | None:
        """``(generation, base)`` where the run writes a delta layer (its documents rows then carry
        new principals, quarry/store/layers.py); None for a whole catalog."""
        return (self.generation, self.prev_chain[0]) if self.delta else None

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
            self._set_meta(key, value)
        self._update_duplicates()
        if self._update_boilerplate():
            self._set_meta("vector_version", str(self.table.version))
        faults.point("fts")
        self._write_search_index()
        if finish is not None and run_row is not None:
            run_row = finish(time.perf_counter() - t0)
        if run_row is not None:
            insert_run(self.con, run_row)
        journal_rows, claimed = journal.claim(self.store, self.generation)
        journal.merge(self.con, journal_rows, insert_run)
        self.con.execute("CHECKPOINT")
        self.con.close()
        self._con = None
        self._drop_private()
        pointer = Pointer(
            generation=self.generation,
            catalog=self.catalog_path.name,
            vector_table=self.table.name,
            vector_version=self.table.version,
            model=self.model,
            dim=self.dim,
            committed_at=time.time(),
            layers=self.chain,
        )
        faults.point("before-commit")
        write_pointer(self.store, pointer)  # <- the commit point
        faults.point("after-commit")
        journal.forget(claimed)
        self._after_commit(pointer)
        return CommitInfo(self.generation, pointer.vector_version, time.perf_counter() - t0)

    def _update_duplicates(self) -> None:
        """Duplicate clusters after this run's changes (quarry/store/dedup.py): documents whose
        assignment changed are rewritten like a permission change."""
        if not (self.content_changed or self.row_changed):
            return
        changed = dedup.update_clusters(self.con, self._acl_layer())
        self.row_changed.update(changed)
        self.line_changed.update(changed)

    def _update_boilerplate(self) -> bool:
        """Boilerplate flags after this run's changes (quarry/store/boilerplate.py): chunks whose
        flag, or with ``QUARRY_BOILERPLATE=strip`` whose BM25 and embedded text, changed are
        rewritten as an edit would; returns whether vectors changed."""
        mode, before = boilerplate.mode(), catalog.get_meta(self.con).get(boilerplate.MARK)
        full = self.recount_boilerplate or before != mode
        if not full and not self.line_changed:
            return False
        result = boilerplate.update(
            self.con,
            self.line_changed,
            self.removed_lines,
            self.removed_docs,
            self._acl_layer(),
            strip=mode == "strip",
            lookup=self.lookup_vectors,
            embed=self.embed,
            full=full,
            restore=before == "strip" and mode != "strip",
        )
        if full and result.complete:
            self._set_meta(boilerplate.MARK, mode)
        self.content_changed.update(result.copied)
        if result.vectors is None:
            return False
        self.content_changed.update(result.changed)  # their BM25 texts changed: DuckDB's full-text tables are stale
        vectors.update_rows(self.table, result.vectors)
        if self.run_vectors is not None:
            for chunk_id, vec in result.by_chunk.items():
                if chunk_id in self.run_vectors:
                    self.run_vectors[chunk_id] = vec
        return True

    def _set_meta(self, key: str, value: str) -> None:
        if self.delta:
            layers.set_meta(self.con, key, value)
        else:
            catalog.set_meta(self.con, key, value)

    def _write_search_index(self, force_base: bool = False) -> None:
        """Merge layers as :func:`quarry.store.layers.plan_merge` says, then build ``index-<gen>/``:
        the segment of this generation's layer (a whole index for a base)."""
        from quarry.retrieval import searchindex

        folder = self.folder / searchindex.folder_name(self.generation)
        earlier = None
        if self.delta:
            assert self.base is not None  # a delta layer is written over a committed generation
            prev = searchindex.SearchIndex.load(self.folder / searchindex.folder_name(self.base.generation))
            segments = {s.generation: s for s in prev.segments}
            base_rows = segments[self.prev_chain[0]].n_rows
            deleted = prev.bm25.deleted
            counted = self.con.execute(catalog.load_sql("layer_rows")).fetchone()
            assert counted is not None  # a count: one row
            own_rows = counted[0]
            plan = layers.plan_merge(
                base_rows,
                int(np.count_nonzero(deleted < base_rows)),
                [(g, segments[g].n_rows) for g in self.prev_chain[1:]],
                own_rows,
                force=force_base or self.model_changed,
            )
            if plan is None:
                self._rebase()
            else:
                self.merged = plan
                self.chain = layers.merge(self.con, self.chain, plan)
                earlier = [segments[g] for g in self.chain[:-1]]
                dead_rows, dead_docs = self._deletions(prev, earlier)
                dead_terms = self._deleted_terms(prev, earlier, dead_rows)
        faults.point("after-merge")
        stored: searchindex.VectorSource
        if self.delta:
            assert self.merged is not None  # still a delta: the merge plan above
            stored = _VectorSource(self, prev, set(self.merged))
            manifest = searchindex.build_into(
                folder,
                self.con,
                stored,
                self.model,
                self.dim,
                source=layers.LAYER,
                generation=self.generation,
                earlier=earlier,
                deleted_rows=dead_rows,
                deleted_docs=dead_docs,
                deleted_terms=dead_terms,
            )
        else:
            if catalog.has_fts(self.con):  # an older quarry's, kept in the catalog: stale now (quarry/store/fts.py)
                catalog.drop_fts(self.con)
            stored = self._vectors_in_row_order if self._table is not None else None
            manifest = searchindex.build_into(
                folder, self.con, stored, self.model, self.dim, generation=self.generation
            )
        logging.getLogger("quarry").info(
            "search index: segment of %d chunks (%d live in %d segments), %d terms, IVF %s, built in %.1f s",
            manifest["segment"]["rows"],
            manifest["rows"],
            len(manifest["segments"]),
            manifest["bm25"]["terms"],
            manifest["dense"]["ivf"] or "off",
            manifest["build_seconds"],
        )

    def _deletions(self, prev, earlier) -> tuple[np.ndarray, np.ndarray]:
        """Global row and document ids of the kept earlier segments no longer live: the previous
        generation's (those of segments merged away go with them), plus the rows of documents this
        run changed, in the segment that held them."""
        base = self.prev_chain[0]
        changed = sorted(self.content_changed | self.row_changed)
        owners: dict[str, tuple] = {}
        if changed:
            owned = self.con.execute(catalog.load_sql("layer_previous_owners"), [changed]).fetchall()
            owners = {d: (dl, cl) for d, dl, cl in owned}
        position = {s.generation: i for i, s in enumerate(earlier)}
        row_off = np.cumsum([0] + [s.n_rows for s in earlier])
        doc_off = np.cumsum([0] + [s.n_docs for s in earlier])
        dead_rows = [prev.bm25.deleted[prev.bm25.deleted < row_off[-1]]]
        dead_docs = [prev.cards.bm25.deleted[prev.cards.bm25.deleted < doc_off[-1]]] if prev.cards else []
        by_content: dict[int, list[str]] = {}
        by_row: dict[int, list[str]] = {}
        for doc_id in changed:
            doc_layer, content_layer = owners.get(doc_id, (base, base))
            if doc_id in self.content_changed and content_layer in position:
                by_content.setdefault(content_layer, []).append(doc_id)
            if doc_layer in position:
                by_row.setdefault(doc_layer, []).append(doc_id)
        for gen, docs in by_content.items():
            i = position[gen]
            dead_rows.append(earlier[i].chunk_rows_of(docs) + row_off[i])
        for gen, docs in by_row.items():
            i = position[gen]
            dead_docs.append(earlier[i].doc_rows_of(docs) + doc_off[i])
        row_ids = np.unique(np.concatenate(dead_rows)).astype(np.int64)
        doc_ids = np.unique(np.concatenate(dead_docs)).astype(np.int64) if dead_docs else np.zeros(0, np.int64)
        return row_ids, doc_ids

    def _deleted_terms(self, prev, earlier, dead_rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per kept earlier segment (by generation), the BM25 columns its deleted rows hold and how
        many of them hold each: the previous generation's counts plus those of the rows deleted
        since (all of a segment's deleted rows when no commit counted them yet: an index from an
        older quarry), their texts read from the layer that holds them
        (:func:`quarry.retrieval.bm25.row_columns`). O(the rows deleted); it spares every reader
        counting deleted rows in each query term's column (quarry/retrieval/segmented.py). A
        segment with more than :data:`COUNT_DELETED_MAX` rows to count, or whose texts cannot all
        be read, is left out: its readers count in the columns, as they did before."""
        from quarry.retrieval.bm25 import row_columns
        from quarry.retrieval.segmented import split_rows

        empty = np.zeros(0, dtype=np.int64)
        before_of = {s.generation: prev.bm25.seg_deleted[j] for j, s in enumerate(prev.segments)}
        now = split_rows(dead_rows, np.cumsum([0] + [s.n_rows for s in earlier]))
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for seg, dead in zip(earlier, now):
            counted = prev.deleted_terms.get(seg.generation)
            if counted is None:
                counted, new = (empty, empty), dead
            else:
                new = np.setdiff1d(dead, before_of.get(seg.generation, empty), assume_unique=True)
            if not len(new):
                out[seg.generation] = counted
                continue
            if len(new) > COUNT_DELETED_MAX:  # a large deletion: its readers count in the columns
                continue
            parts = [counted]
            for start in range(0, len(new), COUNT_BATCH):  # texts read a batch at a time
                ids = seg.chunk_ids_at(new[start : start + COUNT_BATCH])
                try:
                    texts = layers.chunk_texts(self.con, seg.generation, self.chain[0], ids)
                except duckdb.Error:
                    break
                if len(texts) != len(ids):  # not the segment's rows: leave it to the readers
                    break
                parts.append(row_columns(seg.bm25, [texts[c] for c in ids]))
            else:
                cols, where = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
                rows = np.bincount(where, weights=np.concatenate([p[1] for p in parts]), minlength=len(cols))
                out[seg.generation] = cols, rows.astype(np.int64)
        return out

    def _rebase(self) -> None:
        """Everything into a new base: the live rows written to a whole catalog of this generation,
        which replaces the delta."""
        path = self.catalog_path
        tmp = Path(f"{path}.rebase")
        layers.write_base(self.con, layers.alias(self.generation), tmp)
        self.con.close()
        self._con = None
        self._drop_private()
        for suffix in ("", ".wal"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        os.replace(tmp, path)
        self._con = catalog.connect(path, read_only=False)
        self.delta = False
        self.chain = (self.generation,)
        self.merged = None

    def merge_all(self) -> None:
        """Make this (otherwise empty) generation a new base of every live row: ``quarry maintain``."""
        self.dirty = True
        if self.delta:
            self._rebase()

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
        # chunks unchanged (moves, touches, permissions, a merge): the previous full-text tables
        # still hold. Nothing is built here: the first match_bm25 query or quarry maintain does.
        if self.duckdb_fts and self.base is not None and not self.content_changed and not self.model_changed:
            from quarry.store import fts

            fts.carry(self.folder, pointer.generation, self.base.generation)

    def _drop_private(self) -> None:
        for folder in self.private:
            shutil.rmtree(folder, ignore_errors=True)
        self.private = []

    def _drop_connection(self) -> None:
        if self._con is not None:
            try:
                self._con.close()
            except Exception:  # noqa: BLE001, S110 - a full or read-only disk: the run's own error says so
                pass
            self._con = None
        self._drop_private()

    def _remove_files(self) -> None:
        for suffix in ("", ".wal", ".rebase", ".rebase.wal"):
            try:
                Path(str(self.catalog_path) + suffix).unlink(missing_ok=True)
            except OSError:  # left for the next run's stale-generation sweep
                pass

    def close(self) -> None:
        """Abandon uncommitted work (if any) and release the lock."""
        try:
            if self._con is not None:
                self._drop_connection()
                self._remove_files()
            self._drop_private()
        finally:
            self.lock.release()

    def __enter__(self) -> StoreWriter:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


class _VectorSource:
    """The vectors of a new layer's segment, in its row order: the run's own (held in memory),
    those of rows a merge brought from earlier segments (read from their files, already unit
    length: the rows live in the previous generation, of documents this run did not change), and
    any other from LanceDB. Returns the matrix and which rows are unit already."""

    def __init__(self, writer: StoreWriter, prev, merged: set[int]):
        self.writer = writer
        self.prev = prev
        self.merged = merged

    def __call__(self, row_ids):
        import pyarrow as pa

        ids = row_ids.to_pylist()
        out = np.zeros((len(ids), self.writer.dim), dtype=np.float32)
        unit = np.zeros(len(ids), dtype=bool)
        if not ids:
            return out, unit
        found = np.zeros(len(ids), dtype=bool)
        own = self.writer.run_vectors or {}
        for i, chunk_id in enumerate(ids):
            v = own.get(chunk_id)
            if v is not None:
                out[i] = v
                found[i] = True
        if not found.all() and self.merged:
            where = {c: i for i, c in enumerate(ids)}
            changed = self.writer.content_changed
            deleted = set(self.prev.bm25.deleted.tolist())
            start = 0
            for seg in self.prev.segments:
                first, start = start, start + seg.n_rows
                if seg.generation not in self.merged or not seg.n_rows:
                    continue
                slots = np.arange(seg.n_rows)
                if seg.dense.slot_rows is not None:  # IVF stores rows cluster by cluster
                    slots = np.empty(seg.n_rows, dtype=np.int64)
                    slots[seg.dense.slot_rows] = np.arange(seg.n_rows)
                docs = seg.rows.column("doc_id").to_pylist()
                for local, chunk_id in enumerate(seg.rows.column("chunk_id").to_pylist()):
                    at = where.get(chunk_id)
                    if at is None or found[at] or first + local in deleted or docs[local] in changed:
                        continue  # a row an older version, or this run, replaced
                    out[at] = seg.dense.vectors[slots[local]]
                    unit[at] = found[at] = True
        if not found.all():
            missing = np.flatnonzero(~found)
            out[missing] = self.writer._vectors_in_row_order(pa.array([ids[i] for i in missing], type=pa.string()))
        return out, unit


def _is_write_error(exc: BaseException) -> bool:
    """Whether an error opening the new catalog is the disk's (full, read-only), not damage."""
    import errno

    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT)
    text = str(exc).lower()
    return any(s in text for s in ("no space", "read-only", "permission denied", "disk quota"))


def _unwritable(path: Path, exc: BaseException) -> QuarryError:
    reason = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0][:200]
    return QuarryError(
        f"cannot write {path}: {reason}; the committed index is "
        "unchanged: free space or fix the store's permissions, then run again"
    )


def _classic_rewrite(con, sql: str, view: str, table) -> None:
    con.register(view, table)
    try:
        con.execute(catalog.load_sql(sql))
    finally:
        con.unregister(view)


def remove_debris(store: Path) -> Pointer | None:
    """Delete catalog generations and index folders that CURRENT does not name and the retention
    does not keep (left by a killed run, or past ``QUARRY_KEEP_GENERATIONS``); returns the pointer.
    The caller holds the writer lock."""
    base = read_pointer(store)
    generations.remove_unkept(store, base.generation if base else None)
    return base


def after_commit(store: Store | Path, pointer: Pointer, table=None) -> None:
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


def insert_run(con, run_row: RunReport | dict) -> None:
    """Insert one ``runs`` row (into a delta layer's own runs when ``con`` writes one); a dict may
    leave fields out (they take :class:`RunReport`'s defaults)."""
    import pyarrow as pa

    report = run_row if isinstance(run_row, RunReport) else RunReport.from_row(run_row)
    table = pa.Table.from_pylist([report.to_row()])
    if layers.is_delta(con):
        layers.insert_run(con, table)
        return
    catalog.migrate(con)  # a catalog from before the newer run columns gains them
    con.register("new_run", table)
    try:
        con.execute(catalog.load_sql("insert_run"))
    finally:
        con.unregister("new_run")
