"""What a delta layer's index segment takes from the segments before it.

A commit over a delta layer (quarry/store/layers.py) writes one new segment (the layer's rows) and
keeps the earlier ones (quarry/retrieval/searchindex.py). It needs, besides the layer's rows:

- the segment's vectors in its row order (:class:`VectorSource`): the run's own, held in memory;
  those of rows a merge brought from earlier segments, read from their files; any other from the
  vector table (a function the store passes in);
- which rows and documents of the kept earlier segments are no longer live (:func:`deletions`);
- per kept earlier segment, the BM25 columns its deleted rows hold (:func:`deleted_terms`), which
  spares every reader counting deleted rows in each query term's column (quarry/retrieval/segmented.py).

The catalog stays the store's: what this module needs of it (where a document's rows were, the
texts of an earlier layer's chunks) comes in as plain values and functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from quarry.retrieval.bm25 import row_columns
from quarry.retrieval.searchindex import IndexSegment, SearchIndex
from quarry.retrieval.segmented import split_rows

__all__ = ["COUNT_BATCH", "COUNT_DELETED_MAX", "VectorSource", "deleted_terms", "deletions"]

# A commit counts the BM25 terms of the rows it deletes (deleted_terms) up to this many rows a
# segment, reading their texts this many at a time; a larger deletion is left to the readers,
# which count deleted rows in a term's column as before.
COUNT_DELETED_MAX = 50_000
COUNT_BATCH = 5_000


class VectorSource:
    """The vectors of a new layer's segment, in its row order: the run's own (``own``: chunk_id ->
    vector), those of rows a merge brought from earlier segments (read from their files, already
    unit length: the rows live in the previous generation, of documents this run did not change),
    and any other from ``read`` (the vector table, by chunk ids). Returns the matrix and which rows
    are unit already."""

    def __init__(
        self,
        prev: SearchIndex,
        merged: set[int],
        dim: int,
        own: Mapping[str, np.ndarray] | None,
        changed: set[str],
        read: Callable[[pa.Array], np.ndarray],
    ):
        self.prev = prev
        self.merged = merged
        self.dim = dim
        self.own = own or {}
        self.changed = changed  # documents whose content this run replaced or deleted
        self.read = read

    def __call__(self, row_ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        ids = row_ids.to_pylist()
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        unit = np.zeros(len(ids), dtype=bool)
        if not ids:
            return out, unit
        found = np.zeros(len(ids), dtype=bool)
        for i, chunk_id in enumerate(ids):
            v = self.own.get(chunk_id)
            if v is not None:
                out[i] = v
                found[i] = True
        if not found.all() and self.merged:
            where = {c: i for i, c in enumerate(ids)}
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
                    if at is None or found[at] or first + local in deleted or docs[local] in self.changed:
                        continue  # a row an older version, or this run, replaced
                    out[at] = seg.dense.vectors[slots[local]]
                    unit[at] = found[at] = True
        if not found.all():
            missing = np.flatnonzero(~found)
            out[missing] = self.read(pa.array([ids[i] for i in missing], type=pa.string()))
        return out, unit


def deletions(
    prev: SearchIndex,
    earlier: Sequence[IndexSegment],
    base: int,
    content_changed: set[str],
    row_changed: set[str],
    owners: Mapping[str, tuple[int | None, int | None]],
) -> tuple[np.ndarray, np.ndarray]:
    """Global row and document ids of the kept ``earlier`` segments no longer live: the previous
    generation's (those of segments merged away go with them), plus the rows of documents this run
    changed, in the segment that held them. ``owners``: doc_id -> (the layer of its documents row,
    the layer of its chunks) before this run, for the changed documents that were not ``base``'s."""
    changed = sorted(content_changed | row_changed)
    position = {s.generation: i for i, s in enumerate(earlier)}
    row_off = np.cumsum([0] + [s.n_rows for s in earlier])
    doc_off = np.cumsum([0] + [s.n_docs for s in earlier])
    dead_rows = [prev.bm25.deleted[prev.bm25.deleted < row_off[-1]]]
    dead_docs = [prev.cards.bm25.deleted[prev.cards.bm25.deleted < doc_off[-1]]] if prev.cards else []
    by_content: dict[int, list[str]] = {}
    by_row: dict[int, list[str]] = {}
    for doc_id in changed:
        doc_layer, content_layer = owners.get(doc_id, (base, base))
        if doc_id in content_changed and content_layer in position:
            assert content_layer is not None  # a position: a generation
            by_content.setdefault(content_layer, []).append(doc_id)
        if doc_layer in position:
            assert doc_layer is not None
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


def deleted_terms(
    prev: SearchIndex,
    earlier: Sequence[IndexSegment],
    dead_rows: np.ndarray,
    texts_of: Callable[[int, list[str]], dict[str, str] | None],
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per kept earlier segment (by generation), the BM25 columns its deleted rows hold and how
    many of them hold each: the previous generation's counts plus those of the rows deleted since
    (all of a segment's deleted rows when no commit counted them yet: an index from an older
    quarry), their texts read by ``texts_of(generation, chunk_ids)`` from the layer that holds them
    (None: they cannot be read) (:func:`quarry.retrieval.bm25.row_columns`). O(the rows deleted).
    A segment with more than :data:`COUNT_DELETED_MAX` rows to count, or whose texts cannot all be
    read, is left out: its readers count in the columns, as they did before."""
    empty = np.zeros(0, dtype=np.int64)
    before_of = {s.generation: prev.bm25.seg_deleted[j] for j, s in enumerate(prev.segments)}
    now = split_rows(dead_rows, np.cumsum([0] + [s.n_rows for s in earlier]))
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for seg, dead in zip(earlier, now, strict=False):
        assert seg.generation is not None  # a kept segment of a layered index
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
            texts = texts_of(seg.generation, ids)
            if texts is None or len(texts) != len(ids):  # not the segment's rows: leave it to the readers
                break
            parts.append(row_columns(seg.bm25, [texts[c] for c in ids]))
        else:
            cols, where = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
            rows = np.bincount(where, weights=np.concatenate([p[1] for p in parts]), minlength=len(cols))
            out[seg.generation] = cols, rows.astype(np.int64)
    return out
