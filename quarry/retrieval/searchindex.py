"""The search index of a committed generation: BM25 and vectors as memory-mapped files.

At commit time the writer builds ``<store>/index-<gen>/`` next to ``catalog-<gen>.duckdb``,
before the pointer rename, so a reader sees both or neither. It saves each part (result rows and
document cards, BM25, vectors) as soon as it is built and drops it before building the next
(:func:`build_into`), so a commit holds one part at a time::

    index-000007/
      index.json              manifest: version, rows, model, dim, build info
      rows.arrow, docs.arrow  what results show, by row and by document (rows.py)
      cards.*                 BM25 over each document's path and facets, each row's document (cards.py)
      bm25.*                  BM25 term weights, a CSC sparse matrix (bm25.py)
      dense.*, ivf.*          unit vectors, cluster by cluster when IVF is built (dense.py)

A row id is a chunk's position in chunk_id order, the same order ``sql/filter_rows.sql`` numbers
rows in, so a filter is one DuckDB query returning row ids, turned into a boolean mask that both
retrievers apply before they take their top candidates.

A run that changes no chunk hard-links the previous generation's files instead of rebuilding
(all but ``docs.arrow`` and ``cards.*``, rewritten because a move changes a path).
Readers ``np.load(..., mmap_mode="r")`` every file when they open a snapshot, so a later commit
that deletes the folder cannot pull it from under them (an unlinked file lives while mapped).
A store committed before these files existed is indexed in memory on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import pyarrow as pa

from quarry.retrieval import bm25, cards, dense, rows
from quarry.core.safeio import fsync_dir
from quarry.core.environment import environment

INDEX_VERSION = 2
MANIFEST = "index.json"


def folder_name(generation: int) -> str:
    """The index folder of catalog generation ``generation``."""
    return f"index-{generation:06d}"


def ivf_min_rows() -> int:
    """Rows from which IVF is built: ``$QUARRY_IVF_MIN_ROWS`` (default :data:`dense.IVF_MIN_ROWS`)."""
    return environment().ivf_min_rows


def build(con, vectors, model: str = "", dim: int = 0, ivf_rows: int | None = None) -> tuple[dict, dict]:
    """Index arrays for the catalog ``con`` and the vectors of the same version, all in memory.

    ``vectors`` is a function of the row ids (chunk ids in row order, an Arrow array) returning
    a float32 matrix in row order that the build may change in place
    (``quarry.store.vectors.read_in_row_order`` bound to a table: one copy of the vectors in
    memory), or ``(chunk_ids, matrix)`` as ``quarry.store.vectors.read_all`` returns, or None
    for a store without a vector table. Returns ``(arrays, manifest)``; :func:`write` saves them.
    :func:`build_into` builds the same files holding one part at a time.
    """
    arrays: dict = {}
    manifest: dict = {}
    for part in _parts(con, vectors, model, dim, ivf_rows, manifest):
        arrays.update(part)
    return arrays, manifest


def build_into(folder: Path, con, vectors, model: str = "", dim: int = 0, ivf_rows: int | None = None) -> dict:
    """Build the files of :func:`build` and save them into ``folder`` (as :func:`write` does),
    each part as soon as it is built and dropped before the next: result rows and cards, BM25,
    vectors. What a commit holds is then the largest part, not their sum (at 1M chunks: 0.8 GB
    of rows, 0.7 GB of BM25 postings, 1.5 GB of vectors). Returns the manifest."""
    manifest: dict = {}
    with _staged(folder) as tmp:
        for part in _parts(con, vectors, model, dim, ivf_rows, manifest, folder=tmp):
            for name in list(part):
                _save(tmp / name, part.pop(name))
            del part  # before the generator builds the next part
        _save_manifest(tmp, manifest)
    return manifest


def _parts(con, vectors, model: str, dim: int, ivf_rows: int | None, manifest: dict, folder: Path | None = None):
    """The index files a part at a time (dicts of file name -> content); fills ``manifest`` once
    the last part is out. Holds no part after yielding it. With ``folder``, ``rows.arrow`` is
    written there as the catalog streams it, and is not in a part."""
    t0 = time.perf_counter()
    if folder is not None:
        ids, row_docs = rows.write_rows(con, folder / rows.ROWS)
        part: dict = {}
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
    if vectors is None:
        matrix = np.zeros((n, dim), dtype=np.float32)
    elif callable(vectors):
        matrix = vectors(ids)
    else:
        matrix = _vectors_in_row_order(ids, *vectors)
    read_seconds = time.perf_counter() - t1
    # In place: the matrix is ours, and at 1M x 384 each copy is 1.5 GB of the commit's peak.
    dense.normalise_inplace(matrix)
    out_dim = int(matrix.shape[1]) if matrix.ndim == 2 else dim
    part, dense_info = dense.build(matrix, ivf_min_rows() if ivf_rows is None else ivf_rows, inplace=True)
    del matrix  # with IVF, now in storage order as dense.vectors.npy
    manifest.update({
        "version": INDEX_VERSION,
        "rows": n,
        "model": model,
        "dim": out_dim,
        "bm25": bm25_info,
        "cards": card_info,
        "dense": {**dense_info, "read_seconds": round(read_seconds, 3)},
        "rows_seconds": round(rows_seconds, 3),
        "build_seconds": round(time.perf_counter() - t0, 3),
    })
    yield part


def _vectors_in_row_order(row_ids, lance_ids, matrix: np.ndarray) -> np.ndarray:
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


def write(folder: Path, arrays: dict, manifest: dict) -> None:
    """Save ``arrays`` and the manifest into ``folder`` (written aside, then renamed into place)."""
    with _staged(folder) as tmp:
        for name, value in arrays.items():
            _save(tmp / name, value)
        _save_manifest(tmp, manifest)


@contextmanager
def _staged(folder: Path):
    """A fresh folder beside ``folder`` to write into; renamed into place when the block ends
    without an error (a dead run's leftover is removed by :func:`quarry.store.generations.remove_unkept`)."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    fsync_dir(folder.parent)


def _save(path: Path, value) -> None:
    with open(path, "wb") as fh:
        if isinstance(value, bytes):
            fh.write(value)
        elif isinstance(value, pa.Table):
            rows.save(value, fh)
        else:
            np.save(fh, value, allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())


def _save_manifest(folder: Path, manifest: dict) -> None:
    with open(folder / MANIFEST, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())


def link(source: Path, folder: Path, con) -> None:
    """Give ``folder`` the files of ``source`` (hard links: no copy) for a run that changed no
    chunk; ``docs.arrow`` is rewritten from the catalog ``con``, since paths may have moved."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    docs = rows.build_docs(con)
    with open(tmp / rows.DOCS, "wb") as fh:
        rows.save(docs, fh)
        fh.flush()
        os.fsync(fh.fileno())
    fresh = {rows.DOCS}
    if (source / cards.ROW_DOC).exists():
        card_arrays, _ = cards.build(con, docs, rows.load(source / rows.ROWS).column("doc_id"))
        for name, value in card_arrays.items():
            _save(tmp / name, value)
        fresh.update(card_arrays)
    for path in source.iterdir():
        if path.name in fresh:
            continue
        try:
            os.link(path, tmp / path.name)
        except OSError:
            shutil.copy2(path, tmp / path.name)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    fsync_dir(folder.parent)


def is_complete(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return manifest.get("version") == INDEX_VERSION



class SearchIndex:
    """The loaded index of one generation: result rows, BM25 and vectors."""

    def __init__(self, arrays: dict, manifest: dict):
        self.manifest = manifest
        self.n_rows = int(manifest["rows"])
        self.results = rows.ResultRows(arrays[rows.ROWS], arrays[rows.DOCS])
        self.bm25 = bm25.BM25Index(arrays, self.n_rows)
        self.dense = dense.DenseIndex(arrays)
        # None for a generation committed before cards existed: fusion then skips the documents
        self.cards = cards.Cards(arrays, len(arrays[rows.DOCS])) if cards.Cards.present(arrays) else None

    @classmethod
    def load(cls, folder: Path) -> SearchIndex:
        """Memory-map every file of ``folder`` now (see the module docstring for why now)."""
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("version") != INDEX_VERSION:
            raise ValueError(f"{folder} holds index version {manifest.get('version')}, not {INDEX_VERSION}")
        # np.asarray drops the memmap subclass (slicing one costs microseconds of Python each
        # time); the plain arrays still read the mapped files, which stay open through them.
        arrays: dict = {p.name: np.asarray(np.load(p, mmap_mode="r")) for p in folder.glob("*.npy")}
        for path in folder.glob("*.bin"):
            size = path.stat().st_size
            arrays[path.name] = np.asarray(np.memmap(path, dtype=np.uint8, mode="r")) if size else b""
        for name in (rows.ROWS, rows.DOCS):
            arrays[name] = rows.load(folder / name)
        return cls(arrays, manifest)

    def chunk_ids(self, row_ids) -> list[str]:
        return self.results.chunk_ids(row_ids)
