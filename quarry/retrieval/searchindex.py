"""The search index of a committed generation: segments of memory-mapped BM25 and vector files.

Every commit writes ``<store>/index-<gen>/`` next to ``catalog-<gen>.duckdb``, before the pointer
rename, so a reader sees both or neither. The folder holds one *segment* — the index of the rows
that generation's catalog layer holds (quarry/store/layers.py): the chunks and documents its run
added or changed, or everything after a merge — and the generation's manifest, which lists the
segments that make up the generation (the segment of every layer of its catalog, oldest first)
and the rows of earlier segments it no longer holds::

    index-000007/
      index.json              manifest: version, the generation's segments and live counts,
                              this segment's build info
      deleted.rows.npy        global row ids no longer live (absent when none)
      deleted.docs.npy        global document row ids no longer live (absent when none)
      deleted.terms.npy       (segment generation, BM25 column, deleted rows holding it), int32, of the
                              deleted rows, counted by the commits that deleted them
      rows.arrow, docs.arrow  what results show, by row and by document (rows.py)
      cards.*                 BM25 over each document's path and facets, each row's document (cards.py)
      bm25.*                  BM25 term weights, term frequencies and row lengths (bm25.py)
      dense.*, ivf.*          unit vectors, cluster by cluster when IVF is built (dense.py)

Rows are numbered segment after segment; within a segment in chunk_id order (documents in doc_id
order). :class:`SearchIndex` combines the segments (quarry/retrieval/segmented.py): BM25 with the
statistics of all live rows, exactly; vectors per segment; results and document cards.
``sql/filter_rows.sql`` numbers the catalog's live chunks the same way, so a filter is one DuckDB
query returning row ids, turned into a boolean mask both retrievers apply before their top
candidates.

The build saves each part (result rows and cards, BM25, vectors) as soon as it is built and drops
it before building the next (:func:`build_into`), so a commit holds one part at a time. Readers
``np.load(..., mmap_mode="r")`` every file when they open a snapshot, so a later commit that
deletes a folder cannot pull it from under them (an unlinked file lives while mapped). A store
committed before these files existed is indexed in memory on first use; a folder of version 2 (one
segment holding every row, from an older quarry) is read as a generation of one segment.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from quarry.core.environment import environment
from quarry.core.safeio import fsync_dir
from quarry.retrieval import bm25, cards, dense, rows
from quarry.retrieval.segmented import SegmentedBM25, SegmentedDense, split_rows

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

# The vectors of a build (see :func:`build`): a function of the row ids returning the matrix (or
# the matrix and which rows are unit already), the (chunk ids, matrix) of a vector table, or None.
VectorSource = (
    Callable[[pa.Array], np.ndarray | tuple[np.ndarray, np.ndarray]]
    | tuple[pa.Array | pa.ChunkedArray, np.ndarray]
    | None
)

INDEX_VERSION = 3
READS = (2, 3)  # folder versions a reader understands
MANIFEST = "index.json"
DELETED_ROWS = "deleted.rows.npy"
DELETED_DOCS = "deleted.docs.npy"
DELETED_TERMS = "deleted.terms.npy"
SOURCES = ("main", "layer")  # the schema a segment's rows are read from: a whole catalog, or a layer's own


def folder_name(generation: int) -> str:
    """The index folder of catalog generation ``generation``."""
    return f"index-{generation:06d}"


def ivf_min_rows() -> int:
    """Rows from which IVF is built: ``$QUARRY_IVF_MIN_ROWS`` (default :data:`dense.IVF_MIN_ROWS`)."""
    return environment().ivf_min_rows


def use_source(con: DuckDBPyConnection, source: str) -> None:
    """Point the index queries (``index_chunks``, ``index_sections``, ``index_documents``) at the
    tables of ``source``: the catalog's own (``main``) or a delta layer's own rows (``layer``)."""
    if source not in SOURCES:
        raise ValueError(f"unknown index source {source!r}")
    for table in ("chunks", "sections", "documents"):
        con.execute(f"CREATE OR REPLACE TEMP VIEW index_{table} AS SELECT * FROM {source}.{table}")


def build(
    con: DuckDBPyConnection,
    vectors: VectorSource,
    model: str = "",
    dim: int = 0,
    ivf_rows: int | None = None,
    source: str = "main",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Index arrays for the catalog ``con`` and the vectors of the same version, all in memory.

    ``vectors`` is a function of the row ids (chunk ids in row order, an Arrow array) returning a
    float32 matrix in row order that the build may change in place
    (``quarry.store.vectors.read_in_row_order`` bound to a table: one copy of the vectors in memory),
    or such a matrix with a bool per row that is True where the row is already unit length (rows
    taken from another segment's files), or ``(chunk_ids, matrix)`` as
    ``quarry.store.vectors.read_all`` returns, or None for a store without a vector table. Returns
    ``(arrays, manifest)``; :func:`write` saves them. :func:`build_into` builds the same files
    holding one part at a time.
    """
    arrays: dict[str, Any] = {}
    manifest: dict[str, Any] = {}
    use_source(con, source)
    for part in _parts(con, vectors, model, dim, ivf_rows, manifest):
        arrays.update(part)
    return arrays, manifest


def build_into(
    folder: Path,
    con: DuckDBPyConnection,
    vectors: VectorSource,
    model: str = "",
    dim: int = 0,
    ivf_rows: int | None = None,
    source: str = "main",
    generation: int | None = None,
    earlier: list[IndexSegment] | None = None,
    deleted_rows: np.ndarray | None = None,
    deleted_docs: np.ndarray | None = None,
    deleted_terms: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Build the segment of :func:`build` and save it into ``folder`` (as :func:`write` does), each
    part as soon as it is built and dropped before the next: result rows and cards, BM25, vectors.
    What a commit holds is then the largest part, not their sum (at 1M chunks: 0.8 GB of rows,
    0.7 GB of BM25 postings, 1.5 GB of vectors).

    ``earlier``: the loaded :class:`IndexSegment` objects this generation keeps before its own (none: the
    segment is the whole index); ``deleted_rows`` / ``deleted_docs``: their row and document ids
    (global, sorted) no longer live; ``deleted_terms``: per earlier segment's generation, the BM25
    columns its deleted rows hold and how many of them hold each (a segment left out: not counted,
    its readers count in the columns). Returns the generation's manifest."""
    manifest: dict[str, Any] = {}
    use_source(con, source)
    base = earlier[0] if earlier else None
    shared = base if base is not None and base.dense.has_ivf and base.generation is not None else None
    with _staged(folder) as tmp:
        for part in _parts(
            con,
            vectors,
            model,
            dim,
            ivf_rows,
            manifest,
            folder=tmp,
            centroids=shared.dense.centroids if shared is not None else None,
        ):
            for name in list(part):
                _save(tmp / name, part.pop(name))
            del part  # before the generator builds the next part
        if manifest["dense"].get("base_ivf"):
            assert shared is not None  # the segment was laid out by the base's centroids
            manifest["dense"]["base_ivf"]["generation"] = shared.generation
        manifest = generation_manifest(manifest, generation, earlier or [], deleted_rows, deleted_docs)
        for name, ids in ((DELETED_ROWS, deleted_rows), (DELETED_DOCS, deleted_docs)):
            if ids is not None and len(ids):
                _save(tmp / name, np.asarray(ids, dtype=np.int64))
        if deleted_terms:
            manifest["deleted"]["terms"] = sorted(int(g) for g in deleted_terms)
            table = [
                np.column_stack(
                    [
                        np.full(len(cols), g, dtype=np.int32),
                        np.asarray(cols, dtype=np.int32),
                        np.asarray(counts, dtype=np.int32),
                    ]
                )
                for g, (cols, counts) in sorted(deleted_terms.items())
                if len(cols)
            ]
            if table:
                _save(tmp / DELETED_TERMS, np.concatenate(table))
        _save_manifest(tmp, manifest)
    return manifest


def generation_manifest(
    segment: dict[str, Any],
    generation: int | None,
    earlier: list[IndexSegment],
    deleted_rows: npt.ArrayLike | None,
    deleted_docs: npt.ArrayLike | None,
) -> dict[str, Any]:
    """The manifest of a generation whose own segment is described by ``segment`` (what the build
    filled in) and which keeps the ``earlier`` segments, with these rows and documents deleted:
    the segments and the live counts and lengths BM25 needs (kept here, so no reader sums them)."""
    deleted_rows = np.asarray(deleted_rows if deleted_rows is not None else [], dtype=np.int64)
    deleted_docs = np.asarray(deleted_docs if deleted_docs is not None else [], dtype=np.int64)
    own = {
        "generation": generation,
        "rows": segment["rows"],
        "documents": segment["cards"]["documents"],
        "length": segment["bm25"]["length"],
        "card_length": segment["cards"]["length"],
    }
    segments = [seg.summary() for seg in earlier] + [own]
    row_offsets = np.cumsum([0] + [s["rows"] for s in segments])
    doc_offsets = np.cumsum([0] + [s["documents"] for s in segments])
    dead_length = dead_card_length = 0
    # (segments of this index version store their row lengths)
    for seg, local in zip(earlier, split_rows(deleted_rows, row_offsets)):
        if len(local):
            assert seg.bm25.length is not None
            dead_length += int(seg.bm25.length[local].sum(dtype=np.int64))
    for seg, local in zip(earlier, split_rows(deleted_docs, doc_offsets)):
        if len(local) and seg.cards is not None:
            assert seg.cards.bm25.length is not None
            dead_card_length += int(seg.cards.bm25.length[local].sum(dtype=np.int64))
    live = {
        "rows": int(row_offsets[-1]) - len(deleted_rows),
        "documents": int(doc_offsets[-1]) - len(deleted_docs),
        "length": sum(s["length"] for s in segments) - dead_length,
        "card_length": sum(s["card_length"] for s in segments) - dead_card_length,
    }
    return {
        **segment,
        "version": INDEX_VERSION,
        "generation": generation,
        "rows": live["rows"],
        "segments": segments,
        "live": live,
        "deleted": {"rows": int(len(deleted_rows)), "documents": int(len(deleted_docs))},
        "segment": {k: segment[k] for k in ("rows", "bm25", "cards", "dense", "build_seconds") if k in segment},
    }


def _parts(
    con: DuckDBPyConnection,
    vectors: VectorSource,
    model: str,
    dim: int,
    ivf_rows: int | None,
    manifest: dict[str, Any],
    folder: Path | None = None,
    centroids: np.ndarray | None = None,
) -> Iterator[dict[str, Any]]:
    """The index files a part at a time (dicts of file name -> content); fills ``manifest`` once
    the last part is out. Holds no part after yielding it. With ``folder``, ``rows.arrow`` is
    written there as the catalog streams it, and is not in a part. ``centroids``: the base
    segment's IVF centroids, which a segment too small for its own IVF is laid out by."""
    t0 = time.perf_counter()
    if folder is not None:
        ids, row_docs = rows.write_rows(con, folder / rows.ROWS)
        part: dict[str, Any] = {}
    else:
        row_table = rows.build_rows(con)
        ids, row_docs = row_table.column("chunk_id").combine_chunks(), row_table.column("doc_id")
        part = {rows.ROWS: row_table}
        del row_table
    n = len(ids)
    docs = rows.build_docs(con)
    card_arrays, card_info = cards.build(con, docs, row_docs)
    part.update({rows.DOCS: docs, **card_arrays})
    del row_docs, docs, card_arrays
    rows_seconds = time.perf_counter() - t0
    yield part
    del part
    part, bm25_info = bm25.build(con, n)
    yield part
    del part
    t1 = time.perf_counter()
    unit: np.ndarray | None = None
    matrix: np.ndarray
    if vectors is None:
        matrix = np.zeros((n, dim), dtype=np.float32)
    elif callable(vectors):
        got = vectors(ids)
        if isinstance(got, tuple):
            matrix, unit = got
        else:
            matrix = got
    else:
        matrix = _vectors_in_row_order(ids, *vectors)
    read_seconds = time.perf_counter() - t1
    # In place: the matrix is ours, and at 1M x 384 each copy is 1.5 GB of the commit's peak.
    if unit is None or not unit.any():
        dense.normalise_inplace(matrix)
    elif not unit.all():  # rows from another segment's files are unit already: normalised twice, they would move
        raw = np.flatnonzero(~unit)
        matrix[raw] = dense.normalise(matrix[raw])
    out_dim = int(matrix.shape[1]) if matrix.ndim == 2 else dim
    part, dense_info = dense.build(
        matrix, ivf_min_rows() if ivf_rows is None else ivf_rows, inplace=True, centroids=centroids
    )
    del matrix  # with IVF, now in storage order as dense.vectors.npy
    manifest.update(
        {
            "version": INDEX_VERSION,
            "rows": n,
            "model": model,
            "dim": out_dim,
            "bm25": bm25_info,
            "cards": card_info,
            "dense": {**dense_info, "read_seconds": round(read_seconds, 3)},
            "rows_seconds": round(rows_seconds, 3),
            "build_seconds": round(time.perf_counter() - t0, 3),
        }
    )
    yield part


def _vectors_in_row_order(row_ids: pa.Array, lance_ids: pa.Array | pa.ChunkedArray, matrix: np.ndarray) -> np.ndarray:
    import pyarrow.compute as pc

    out = np.zeros((len(row_ids), matrix.shape[1] if matrix.size else 0), dtype=np.float32)
    if not len(lance_ids):
        return out
    where = pc.index_in(lance_ids, value_set=row_ids).to_numpy(zero_copy_only=False)
    known = ~np.isnan(where.astype(np.float64))  # a vector whose chunk the catalog lacks: skipped
    if known.all():  # the usual case: no boolean-mask copy of the whole matrix
        out[where.astype(np.int64)] = matrix
    else:
        out[where[known].astype(np.int64)] = matrix[known]
    return out


def write(folder: Path, arrays: dict[str, Any], manifest: dict[str, Any]) -> None:
    """Save ``arrays`` and the manifest of a one-segment generation (the folder's, ``index-<gen>``)
    into ``folder`` (written aside, then renamed into place)."""
    generation = int(folder.name.removeprefix("index-")) if folder.name.removeprefix("index-").isdigit() else None
    with _staged(folder) as tmp:
        for name, value in arrays.items():
            _save(tmp / name, value)
        _save_manifest(tmp, generation_manifest(manifest, generation, [], None, None))


@contextmanager
def _staged(folder: Path) -> Iterator[Path]:
    """A fresh folder beside ``folder`` to write into; renamed into place when the block ends
    without an error (a dead run's leftover is removed by :func:`quarry.store.generations.remove_unkept`)."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    fsync_dir(folder.parent)


def _save(path: Path, value: np.ndarray | bytes | pa.Table) -> None:
    with open(path, "wb") as fh:
        if isinstance(value, bytes):
            fh.write(value)
        elif isinstance(value, pa.Table):
            rows.save(value, fh)
        else:
            np.save(fh, value, allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())


def _save_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    with open(folder / MANIFEST, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of an index folder, or None when it is missing, unreadable or of a version
    this quarry does not read."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("version") in READS else None


def segment_generations(folder: Path) -> list[int]:
    """The generations whose segments make up the generation of ``folder`` (its own included)."""
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("version") == 2 or "segments" not in manifest:
        return []
    return [int(s["generation"]) for s in manifest["segments"]]


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` holds a finished index of this version whose segments are all present."""
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("version") != INDEX_VERSION:
        return False
    for gen in segment_generations(folder):
        if gen != manifest.get("generation") and read_manifest(folder.parent / folder_name(gen)) is None:
            return False
    return True


class IndexSegment:
    """The loaded files of one segment of the search index (not a search result's
    :class:`quarry.search.segments.Segment`, a run of relevant chunks)."""

    def __init__(self, generation: int | None, arrays: dict[str, Any], info: dict[str, Any]):
        self.generation = generation
        self.info = info
        self.n_rows = int(info["rows"])
        self.rows = arrays[rows.ROWS]
        self.docs = arrays[rows.DOCS]
        self.n_docs = self.docs.num_rows
        self.bm25 = bm25.BM25Index(arrays, self.n_rows)
        self.dense = dense.DenseIndex(arrays)
        # None for a generation committed before cards existed: fusion then skips the documents
        self.cards = cards.Cards(arrays, self.n_docs) if cards.Cards.present(arrays) else None

    @classmethod
    def load(cls, folder: Path, generation: int | None = None) -> IndexSegment:
        """Memory-map the segment files of ``folder`` now (see the module docstring for why now)."""
        manifest = read_manifest(folder)
        if manifest is None:
            raise ValueError(f"{folder} holds no index this quarry reads")
        # np.asarray drops the memmap subclass (slicing one costs microseconds of Python each
        # time); the plain arrays still read the mapped files, which stay open through them.
        arrays: dict[str, Any] = {
            p.name: np.asarray(np.load(p, mmap_mode="r"))
            for p in folder.glob("*.npy")
            if not p.name.startswith("deleted.")
        }
        for path in folder.glob("*.bin"):
            size = path.stat().st_size
            arrays[path.name] = np.asarray(np.memmap(path, dtype=np.uint8, mode="r")) if size else b""
        for name in (rows.ROWS, rows.DOCS):
            arrays[name] = rows.load(folder / name)
        info = manifest.get("segment", manifest)
        return cls(generation if generation is not None else manifest.get("generation"), arrays, info)

    def summary(self) -> dict[str, Any]:
        """What a generation's manifest lists about this segment."""
        return {
            "generation": self.generation,
            "rows": self.n_rows,
            "documents": self.n_docs,
            "length": int(self.bm25.length_total or 0),
            "card_length": int(self.cards.bm25.length_total or 0) if self.cards is not None else 0,
        }

    def chunk_rows_of(self, doc_ids: list[str]) -> np.ndarray:
        """Local rows of these documents' chunks (chunk ids ``<doc_id>:<n>`` sort together)."""
        column = _single(self.rows.column("chunk_id"))
        keys = _Keys(column)
        out: list[int] = []
        for doc_id in doc_ids:
            prefix = f"{doc_id}:"
            lo = bisect.bisect_left(keys, prefix)
            hi = bisect.bisect_left(keys, prefix[:-1] + ";", lo)  # ';' follows ':'
            out.extend(range(lo, hi))
        return np.array(sorted(out), dtype=np.int64)

    def chunk_ids_at(self, local_rows: Iterable[int]) -> list[str]:
        """The chunk ids of these local rows."""
        column = _single(self.rows.column("chunk_id"))
        return [column[int(r)].as_py() for r in local_rows]

    def doc_rows_of(self, doc_ids: list[str]) -> np.ndarray:
        """Local rows of these documents in ``docs.arrow``."""
        keys = _Keys(_single(self.docs.column("doc_id")))
        out = []
        for doc_id in doc_ids:
            pos = bisect.bisect_left(keys, doc_id)
            if pos < len(keys) and keys[pos] == doc_id:
                out.append(pos)
        return np.array(sorted(out), dtype=np.int64)


class _Keys:
    """A sorted Arrow string column as a sequence for :mod:`bisect` (one value read per probe)."""

    def __init__(self, column: pa.Array | pa.ChunkedArray) -> None:
        self.column = column

    def __len__(self) -> int:
        return len(self.column)

    def __getitem__(self, i: int) -> str:
        value: str = self.column[i].as_py()
        return value


def _deleted_terms(manifest: dict[str, Any], table: np.ndarray | None) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{segment generation: (columns, deleted rows holding each)}`` for the segments whose deleted
    rows the commits counted (``deleted.terms`` in the manifest), from ``deleted.terms.npy``."""
    counted = (manifest.get("deleted") or {}).get("terms") or []
    empty = np.zeros(0, dtype=np.int64)
    out = {int(g): (empty, empty) for g in counted}
    if table is not None and len(table):
        cuts = np.flatnonzero(np.diff(table[:, 0])) + 1
        for part in np.split(table, cuts):
            if int(part[0, 0]) in out:
                out[int(part[0, 0])] = (np.ascontiguousarray(part[:, 1]), np.ascontiguousarray(part[:, 2]))
    return out


def _single(column: pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    return column.chunk(0) if column.num_chunks == 1 else column


def _share_base_ivf(segments: list[IndexSegment]) -> None:
    """Give the small segments laid out by the base's clusters (``dense.base_ivf`` in their
    manifest: the base's generation) the base's centroids, so IVF probes them with the base."""
    if not segments:
        return
    base = segments[0]
    centroids = base.dense.centroids
    if centroids is None:  # the base has no IVF
        return
    for seg in segments[1:]:
        ref = (seg.info.get("dense") or {}).get("base_ivf") or {}
        if ref.get("generation") == base.generation and not seg.dense.has_ivf and seg.n_rows:
            seg.dense.share_centroids(centroids)


class SearchIndex:
    """The loaded index of one generation: its segments, combined (quarry/retrieval/segmented.py).

    ``n_rows`` is the size of the row space (every segment's rows, deleted ones included: masks
    and row ids span it); ``live_rows`` the rows a search can return.
    """

    def __init__(
        self,
        segments: list[IndexSegment],
        manifest: dict[str, Any],
        deleted_rows: npt.ArrayLike | None = None,
        deleted_docs: npt.ArrayLike | None = None,
        deleted_terms: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    ):
        self.segments = segments
        self.deleted_terms = deleted_terms or {}  # segment generation -> (BM25 columns, deleted rows holding each)
        self.manifest = manifest
        deleted_rows = np.asarray(deleted_rows if deleted_rows is not None else [], dtype=np.int64)
        deleted_docs = np.asarray(deleted_docs if deleted_docs is not None else [], dtype=np.int64)
        self.n_rows = sum(s.n_rows for s in segments)
        live = manifest.get("live") or {}
        self.live_rows = int(live.get("rows", self.n_rows - len(deleted_rows)))
        legacy = manifest.get("version") == 2
        self.bm25 = SegmentedBM25(
            [s.bm25 for s in segments],
            deleted_rows,
            self.live_rows,
            int(live.get("length", segments[0].bm25.length_total or 0) if segments else 0),
            [self.deleted_terms.get(s.generation) if s.generation is not None else None for s in segments],
        )
        if legacy:
            self.bm25.exact = True  # one segment of every row, its weights exact; no frequencies stored
        _share_base_ivf(segments)
        self.dense = SegmentedDense([s.dense for s in segments], deleted_rows)
        self.results = rows.SegmentedRows(
            [(s.rows, s.docs, s.cards.row_doc if s.cards is not None else None) for s in segments], deleted_docs
        )
        self.cards: cards.SegmentedCards | None = None
        seg_cards = [s.cards for s in segments if s.cards is not None]
        if segments and len(seg_cards) == len(segments):
            card_bm25 = SegmentedBM25(
                [c.bm25 for c in seg_cards],
                deleted_docs,
                int(live.get("documents", sum(s.n_docs for s in segments) - len(deleted_docs))),
                int(live.get("card_length", seg_cards[0].bm25.length_total or 0)),
            )
            if legacy:
                card_bm25.exact = True
            self.cards = cards.SegmentedCards(card_bm25, self.results)

    @classmethod
    def load(cls, folder: Path) -> SearchIndex:
        """Memory-map every file of the generation of ``folder`` now: its segments (each in the
        folder of the generation that wrote it) and its deletions."""
        manifest = read_manifest(folder)
        if manifest is None:
            raise ValueError(f"{folder} holds no index this quarry reads")
        if manifest.get("version") == 2:
            return cls([IndexSegment.load(folder)], manifest)
        own = int(manifest["generation"])
        segments = [
            IndexSegment.load(folder if g == own else folder.parent / folder_name(g), g)
            for g in (int(s["generation"]) for s in manifest["segments"])
        ]
        deleted: dict[str, np.ndarray | None] = {}
        for name in (DELETED_ROWS, DELETED_DOCS, DELETED_TERMS):
            path = folder / name
            deleted[name] = np.asarray(np.load(path, mmap_mode="r")) if path.exists() else None
        return cls(
            segments,
            manifest,
            deleted[DELETED_ROWS],
            deleted[DELETED_DOCS],
            _deleted_terms(manifest, deleted[DELETED_TERMS]),
        )

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any], manifest: dict[str, Any]) -> SearchIndex:
        """A one-segment index held in memory (:func:`build`'s output)."""
        full = generation_manifest(manifest, manifest.get("generation"), [], None, None)
        return cls([IndexSegment(None, arrays, manifest)], full)

    def chunk_ids(self, row_ids: Iterable[int]) -> list[str]:
        return self.results.chunk_ids(row_ids)

    def row_offsets(self) -> list[tuple[int | None, int]]:
        """``(generation, first row)`` of each segment, in row order (``sql/filter_rows.sql``); the
        generation is None for an index built in memory (:meth:`from_arrays`)."""
        out: list[tuple[int | None, int]] = []
        start = 0
        for seg in self.segments:
            out.append((seg.generation, start))
            start += seg.n_rows
        return out
