"""What a write session changed, and the commit's corpus steps that follow from it.

The writer (quarry/store/writer.py) records here which documents a run wrote, deleted, moved,
touched or gave new permissions; the commit reads it: the duplicate clusters
(quarry/store/dedup.py) and boilerplate flags (quarry/store/boilerplate.py) of the documents whose
lines count differently now, the rows of earlier index segments no longer live
(quarry/retrieval/deltasegment.py), whether DuckDB's full-text tables still hold, and the run's own
vectors for its index segment.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from quarry.core.models import DocumentRecord
from quarry.core.sqlfiles import load_sql
from quarry.store import boilerplate, catalog, dedup, vectors

if TYPE_CHECKING:
    import duckdb
    from lancedb.table import Table as LanceTable

    from quarry.store.catalog import WritingCatalog


__all__ = ["RUN_VECTORS_BYTES", "RunChanges"]


RUN_VECTORS_BYTES = 256 << 20  # vectors of the run's chunks kept for its index segment (beyond: read from LanceDB)


class RunChanges:
    """The documents a run changed, by what changed about them, and the vectors of its chunks."""

    def __init__(self, dim: int):
        self.dim = dim
        self.written: set[str] = set()  # documents whose rows this layer holds (a retried batch replaces them)
        self.content_changed: set[str] = set()  # documents whose sections and chunks this run replaced or deleted
        self.row_changed: set[str] = set()  # documents whose documents row this run replaced, moved or deleted
        self.run_vectors: dict[str, np.ndarray] | None = {}  # chunk_id -> vector of this run's chunks
        # line hash -> documents holding it that this run deleted or replaced (boilerplate)
        self.removed_lines: collections.Counter = collections.Counter()
        self.removed_docs = 0
        # documents whose lines count differently now: content replaced or deleted, moved, re-clustered
        # (not touches or permission changes, which change no line's holders)
        self.line_changed: set[str] = set()

    def note_removed(self, con: duckdb.DuckDBPyConnection, doc_ids: list[str]) -> None:
        """Remember the lines of documents about to be deleted or replaced: their holders drop, and
        the commit checks whether that flips them (quarry/store/boilerplate.py)."""
        if doc_ids:
            self.removed_docs += len(doc_ids)
            self.removed_lines.update(dict(con.execute(load_sql("boilerplate_lines"), [doc_ids]).fetchall()))

    def wrote(self, records: list[DocumentRecord], vecs: dict[str, np.ndarray]) -> None:
        """These documents' rows were replaced; hold their vectors for the index segment, up to
        :data:`RUN_VECTORS_BYTES` (a bigger run reads them back from LanceDB at commit, as a whole
        build does)."""
        doc_ids = [r.doc_id for r in records]
        self.written.update(doc_ids)
        self.content_changed.update(doc_ids)
        self.row_changed.update(doc_ids)
        self.line_changed.update(doc_ids)
        if self.run_vectors is None:
            return
        for r in records:
            for c in r.chunks:
                self.run_vectors[c.chunk_id] = vecs[c.text_hash]
        if len(self.run_vectors) * max(1, self.dim) * 4 > RUN_VECTORS_BYTES:
            self.run_vectors = None

    def deleted(self, doc_ids: list[str]) -> None:
        self.written.difference_update(doc_ids)
        self.content_changed.update(doc_ids)
        self.row_changed.update(doc_ids)
        self.line_changed.update(doc_ids)

    def rewrote(self, doc_ids: Iterable[str], lines_of: Iterable[str] = ()) -> None:
        """Documents rows rewritten (moves, touches, permissions); ``lines_of``: those whose lines
        count differently now (a move to another root)."""
        self.row_changed.update(doc_ids)
        self.line_changed.update(lines_of)

    def update_duplicates(self, cat: WritingCatalog) -> None:
        """Duplicate clusters after this run's changes (quarry/store/dedup.py): documents whose
        assignment changed are rewritten like a permission change."""
        if not (self.content_changed or self.row_changed):
            return
        changed = dedup.update_clusters(cat)
        self.row_changed.update(changed)
        self.line_changed.update(changed)

    def update_boilerplate(
        self,
        cat: WritingCatalog,
        table: LanceTable,
        embed: Callable[[list[str]], np.ndarray] | None,
        recount: bool,
    ) -> bool:
        """Boilerplate flags after this run's changes (quarry/store/boilerplate.py) in the catalog
        ``cat`` writes: chunks whose flag, or with ``QUARRY_BOILERPLATE=strip`` whose BM25 and
        embedded text, changed are rewritten as an edit would, their vectors looked up in ``table``
        or embedded by ``embed``; returns whether vectors changed. ``recount``: every chunk's flag
        from scratch (``quarry maintain``)."""
        con = cat.con
        mode, before = boilerplate.mode(), catalog.get_meta(con).get(boilerplate.MARK)
        full = recount or before != mode
        if not full and not self.line_changed:
            return False
        result = boilerplate.update(
            cat,
            self.line_changed,
            self.removed_lines,
            self.removed_docs,
            strip=mode == "strip",
            lookup=lambda hashes: vectors.lookup_vectors(table, hashes),
            embed=embed,
            full=full,
            restore=before == "strip" and mode != "strip",
        )
        if full and result.complete:
            cat.set_meta(boilerplate.MARK, mode)
        self.content_changed.update(result.copied)
        if result.vectors is None:
            return False
        self.content_changed.update(result.changed)  # their BM25 texts changed: DuckDB's full-text tables are stale
        vectors.update_rows(table, result.vectors)
        if self.run_vectors is not None:
            for chunk_id, vec in result.by_chunk.items():
                if chunk_id in self.run_vectors:
                    self.run_vectors[chunk_id] = vec
        return True
