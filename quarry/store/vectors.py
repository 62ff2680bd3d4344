"""The LanceDB side of the store: one table of chunk vectors per (model, dimension).

The table carries the filterable metadata next to each vector. Its version number is part of
the commit pointer: readers check out exactly that version, so rows a run writes stay
invisible until the pointer moves, and a run that dies is rolled back by restoring it.
"""

from __future__ import annotations

import logging
import os
import re
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from quarry.core import paths
from quarry.core.environment import environment
from quarry.store.handle import Store, as_store

os.environ.setdefault("LANCEDB_LOG", "error")  # LanceDB warns once per query otherwise

_HEX = re.compile(r"^[0-9a-f]+$")
_ID = re.compile(r"^[0-9a-f]+(:[0-9]+)?$")
LOOKUP_BATCH = 500
READ_BATCH = 65_536  # vectors read at a time at commit (96 MB at 384 dimensions)


TABLE_PREFIX = "chunks_"


def table_name(model: str, dim: int) -> str:
    """The table holding vectors of ``model`` at ``dim`` dimensions."""
    slug = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_") or "model"
    return f"{TABLE_PREFIX}{slug}_{dim}"


def schema(model: str, dim: int) -> pa.Schema:
    fields = [
        pa.field("chunk_id", pa.string()),
        pa.field("doc_id", pa.string()),
        pa.field("text_hash", pa.string()),
        pa.field("vector", pa.list_(pa.float32(), dim)),
        pa.field("path", pa.string()),
        pa.field("file_type", pa.string()),
        pa.field("section", pa.string()),
        pa.field("chunk_index", pa.int32()),
        pa.field("page_start", pa.int32()),
        pa.field("page_end", pa.int32()),
    ]
    return pa.schema(fields, metadata={"quarry.model": model, "quarry.dim": str(dim)})


def connect(store: Store | Path):
    """The LanceDB database of ``store``: ``<store>/lance``, or ``<url>/lance`` on object storage
    (endpoint and credentials from the environment, as LanceDB reads them; on Azure, the account
    quarry's own client resolved, passed as ``storage_options``)."""
    import lancedb

    store = as_store(store)
    remote = store.remote
    if remote is None:
        return lancedb.connect(str(store.folder / "lance"))
    return lancedb.connect(remote.lance_uri(), storage_options=remote.lance_options())


def table_names(db) -> list[str]:
    """Every table of the LanceDB database ``db``, page by page: ``db.table_names()`` returns the
    first ten only (its default limit), so a store with more vector tables (models) than that
    would miss the rest."""
    names, token = [], None
    while True:
        page = db.list_tables(page_token=token)
        names.extend(page.tables)
        token = page.page_token
        if not token or not page.tables:
            return names


def _quoted(values: list[str], pattern: re.Pattern = _HEX) -> str:
    # LanceDB predicates are SQL strings; only values that match a strict pattern are inlined.
    for v in values:
        if not pattern.match(v):
            raise ValueError(f"refusing to put {v!r} into a LanceDB predicate")
    return ", ".join(f"'{v}'" for v in values)


def open_for_write(store: Store | Path, model: str, dim: int, committed_version: int):
    """Open (or create) the table for writing, rolled back to ``committed_version``.

    Versions written by a run that never committed are undone here, so a killed run leaves
    no trace in what the next run builds on.
    """
    db = connect(store)
    name = table_name(model, dim)
    if name in table_names(db):
        table = db.open_table(name)
        if committed_version <= 0:
            db.drop_table(name)  # created by a run that never committed
        elif table.version != committed_version:
            table.restore(committed_version)
            return table
        else:
            return table
    return db.create_table(name, schema=schema(model, dim))


def open_for_read(store: Store | Path, name: str, version: int):
    """The table checked out at the committed ``version``."""
    table = connect(store).open_table(name)
    table.checkout(version)
    return table


def lookup_vectors(table, hashes: list[str]) -> dict[str, np.ndarray]:
    """Stored vectors for the given text hashes (the embedding cache), found through the
    ``text_hash`` index once the table has one (:func:`index_keys`)."""
    found: dict[str, np.ndarray] = {}
    unique = sorted(set(hashes))
    for i in range(0, len(unique), LOOKUP_BATCH):
        batch = unique[i : i + LOOKUP_BATCH]
        rows = (
            table.search()
            .where(f"text_hash IN ({_quoted(batch)})")
            .select(["text_hash", "vector"])
            .limit(len(batch) * 64)
            .to_arrow()
        )
        if rows.num_rows:
            vecs = rows.column("vector").combine_chunks().flatten().to_numpy().reshape(rows.num_rows, -1)
            for h, v in zip(rows.column("text_hash").to_pylist(), vecs):
                found.setdefault(h, v.astype(np.float32))
    return found


def read_all(table) -> tuple[pa.Array, np.ndarray]:
    """Every row's chunk id and vector (float32, rows × dim) at the table's checked-out version."""
    rows = table.search().select(["chunk_id", "vector"]).limit(None).to_arrow()
    ids = rows.column("chunk_id").combine_chunks()
    if rows.num_rows == 0:
        return ids, np.zeros((0, 0), dtype=np.float32)
    flat = rows.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return ids, flat.astype(np.float32, copy=False).reshape(rows.num_rows, -1)


def read_in_row_order(table, row_ids: pa.Array, batch_rows: int = READ_BATCH) -> np.ndarray:
    """Every vector of ``table`` (at its checked-out version) at the row of its chunk id in
    ``row_ids``: one float32 matrix, rows × dim. A row without a vector stays zero; a vector whose
    chunk is not in ``row_ids`` is skipped. Read in batches straight into the matrix, so a
    commit never holds the whole table as Arrow beside it (1.5 GB at 1M × 384).

    Rows are found with one dict (about 120 MB at 1M ids), not ``pyarrow.compute.index_in``
    per batch: LanceDB yields a batch per ~1,300 rows whatever ``batch_rows`` asks, and each
    ``index_in`` hashes all of ``row_ids`` again (132 s at 1M rows in 782 fragments).
    """
    dim = table.schema.field("vector").type.list_size if table.count_rows() else 0
    out = np.zeros((len(row_ids), dim), dtype=np.float32)
    if not dim or not len(row_ids):
        return out
    row_of = {chunk_id: row for row, chunk_id in enumerate(row_ids.to_pylist())}
    for batch in table.search().select(["chunk_id", "vector"]).limit(None).to_batches(batch_rows):
        where = np.fromiter(
            (row_of.get(c, -1) for c in batch.column("chunk_id").to_pylist()), dtype=np.int64, count=batch.num_rows
        )
        flat = batch.column("vector").flatten().to_numpy(zero_copy_only=False)
        matrix = flat.astype(np.float32, copy=False).reshape(batch.num_rows, dim)
        known = where >= 0
        if known.all():
            out[where] = matrix
        else:
            out[where[known]] = matrix[known]
    return out


def delete_documents(table, doc_ids: list[str]) -> None:
    for i in range(0, len(doc_ids), LOOKUP_BATCH):
        table.delete(f"doc_id IN ({_quoted(doc_ids[i : i + LOOKUP_BATCH])})")


def move_documents(table, moved: pa.Table) -> None:
    """Set the ``path`` of rows by chunk id (``moved``: ``chunk_id``, ``path``): one merge on
    chunk_id, one table version, however many files of a run moved; vectors stay as they are.
    The merge finds its rows through the ``chunk_id`` index (:func:`index_keys`)."""
    update_rows(table, moved)


def update_rows(table, rows: pa.Table) -> None:
    """Set some columns of rows by chunk id (``rows``: ``chunk_id`` and the columns to set): one
    merge on chunk_id, one table version. The merge finds its rows through the ``chunk_id`` index
    (:func:`index_keys`)."""
    if rows.num_rows:
        index_keys(table)
        table.merge_insert(KEY).when_matched_update_all().execute(rows)


KEY = "chunk_id"
# Columns a commit keeps a BTREE index on: ``chunk_id`` for moves (one merge on it), ``text_hash``
# for the embedding cache (:func:`lookup_vectors`: a one-file run looks up its chunks' hashes).
KEYS = (KEY, "text_hash")


def index_keys(table) -> bool:
    """Keep a BTREE index on each of :data:`KEYS` once the table has ``QUARRY_KEY_INDEX_ROWS``
    (20,000) rows; returns whether this call built one. A failure is logged, never raised: without
    an index a merge or a lookup is slower, still right.

    Without the ``chunk_id`` index LanceDB's ``merge_insert`` reads the whole table, vectors
    included, to find the rows a run's moved files update: 5.1 s and 4 GB of memory for 20,000
    rows of a million-row table here; with it 0.9 s and 0.35 GB (the index itself takes 0.5 s to
    build). Without the ``text_hash`` index, the embedding cache's lookup of a one-file run scans
    the hashes of every row: 0.09 s at a million rows, 0.003 s with it (0.9 s to build, 43 MB).
    Rows a run adds after an index was built are found by a scan of their own fragments, and
    LanceDB's compaction folds them in; past a tenth of the indexed rows the index is built again
    (a commit's bound; ``quarry maintain`` rebuilds every index past ``QUARRY_REINDEX_SHARE``).
    """
    limit = environment().key_index_rows
    built = False
    try:
        if table.count_rows() < limit:
            return False
        have = {tuple(index.columns): index for index in table.list_indices()}
        names = set(table.schema.names)
    except Exception as exc:  # noqa: BLE001 - a LanceDB failure here costs a faster lookup only, retried next commit
        logging.getLogger("quarry").warning("LanceDB indexes not checked, will retry: %s", exc)
        return False
    for column in KEYS:
        if column not in names:
            continue
        index = have.get((column,))
        if index is not None:
            indexed, unindexed = int(index.num_indexed_rows or 0), int(index.num_unindexed_rows or 0)
            if unindexed <= max(limit, indexed // 10):
                continue
        try:
            from lancedb.index import BTree

            table.create_index(column, config=BTree(), replace=True)
            built = True
        except Exception as exc:  # noqa: BLE001 - moves (lookups) read the whole table until a later commit builds it
            logging.getLogger("quarry").warning("LanceDB %s index not built, will retry: %s", column, exc)
    return built


def add_rows(table, rows: pa.Table) -> None:
    if rows.num_rows:
        table.add(rows)


def rows_table(model: str, dim: int, records, vectors: dict[str, np.ndarray]) -> pa.Table:
    """Arrow rows for the chunks of ``records``; ``vectors`` maps text hash to vector."""
    chunks = [(r, c) for r in records for c in r.chunks]
    if not chunks:
        return schema(model, dim).empty_table()
    matrix = np.stack([vectors[c.text_hash] for _, c in chunks]).astype(np.float32)
    section_titles = {(r.doc_id, s.index): s.title for r in records for s in r.sections}
    columns = {
        "chunk_id": [c.chunk_id for _, c in chunks],
        "doc_id": [c.doc_id for _, c in chunks],
        "text_hash": [c.text_hash for _, c in chunks],
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), dim),
        "path": [paths.display(r.file.path) for r, _ in chunks],
        "file_type": [r.file.file_type for r, _ in chunks],
        "section": [section_titles.get((c.doc_id, c.section_index), "") for _, c in chunks],
        "chunk_index": [c.chunk_index for _, c in chunks],
        "page_start": [c.page_start for _, c in chunks],
        "page_end": [c.page_end for _, c in chunks],
    }
    return pa.Table.from_pydict(columns, schema=schema(model, dim))


# lancedb's compact_files() and cleanup_old_versions() need the separate pylance package;
# optimize() is native. It compacts, then prunes versions older than cleanup_older_than.
_NEVER = timedelta(days=36500)


COMPACT_FRAGMENTS = 64  # fragments past which a commit compacts the table (QUARRY_COMPACT_FRAGMENTS)
PRUNE_VERSIONS = 100  # versions past which a commit prunes old ones (QUARRY_PRUNE_VERSIONS)


def compact(table, max_fragments: int | None = None) -> None:
    """Merge small fragments once there are many (each run's add makes one).

    Runs before the commit, so the committed version is the compacted one. Never prunes:
    pruning before the pointer moves could delete the version the pointer still names. LanceDB's
    compaction rewrites every fragment smaller than a million rows next to a small one — the whole
    table of a store below that size — so a commit compacts only past ``QUARRY_COMPACT_FRAGMENTS``
    (64) fragments; ``quarry maintain`` compacts whatever there is.
    """
    limit = environment().compact_fragments if max_fragments is None else max_fragments
    if table.stats()["fragment_stats"]["num_fragments"] > limit:
        table.optimize(cleanup_older_than=_NEVER)


def prune_due(table, keep_for: timedelta = timedelta(hours=1)) -> bool:
    """Whether more than ``QUARRY_PRUNE_VERSIONS`` (100) versions are older than ``keep_for``:
    a commit prunes then, not every time, because LanceDB's ``optimize`` (the only pruning without
    the separate pylance package) also compacts, which rewrites the table (see :func:`compact`);
    and counting only versions old enough to go keeps a burst of commits from compacting at each."""
    stamps = sorted(v["timestamp"] for v in table.list_versions())
    if not stamps:
        return False
    old = sum(1 for t in stamps if t < stamps[-1] - keep_for)
    return old > environment().prune_versions


def prune(table, keep_for: timedelta = timedelta(hours=1), keep_versions: set[int] | frozenset = frozenset()) -> None:
    """Drop versions older than ``keep_for``, but none as old as the oldest of ``keep_versions``
    (those of the generations a store keeps for ``quarry rollback``); call only after a commit.

    Then the committed version is the latest, which is never removed; older versions stay a
    while because a reader may still have one checked out. Ages are measured on LanceDB's own
    clock (from the latest version), so a time zone between the two never matters.
    """
    if keep_versions:
        stamps = {v["version"]: v["timestamp"] for v in table.list_versions()}
        oldest = min((stamps[v] for v in keep_versions if v in stamps), default=None)
        latest = stamps[max(stamps)] if stamps else None
        if oldest is not None and oldest < latest:  # the margin covers the moments since the latest write
            keep_for = max(keep_for, latest - oldest + timedelta(seconds=30))
    table.optimize(cleanup_older_than=keep_for)


def drop_unreferenced(store: Store | Path, names: set[str]) -> list[str]:
    """Drop quarry's vector tables that no kept generation names (an embedding model no longer used)."""
    db = connect(store)
    dropped = []
    for name in table_names(db):
        if name.startswith(TABLE_PREFIX) and name not in names:
            db.drop_table(name)
            dropped.append(name)
    return dropped
