"""The catalog a write session writes, in one of two forms with the same methods.

- :class:`BaseCatalog`: a whole catalog (a new store's first generation, a copy of a catalog an
  older quarry wrote, a merge of everything): rows are replaced, updated and deleted in place,
  and the commit builds a whole search index over it.
- :class:`DeltaCatalog`: a layer over the committed generation (quarry/store/layers.py): rows go
  into the layer's own tables, ``layer.owners`` hides the earlier layers' rows they replace, and
  the commit merges layers as :func:`quarry.store.layers.plan_merge` says (or writes everything
  into a new base) and builds the index segment of the layer
  (quarry/retrieval/deltasegment.py).

The writer (quarry/store/writer.py) calls the same methods on either and never asks which it holds;
:func:`open_catalog` picks the form, and a delta that merges everything becomes a base.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from quarry.core.errors import QuarryError, StoreCorrupt
from quarry.core.models import DocumentRecord, RunReport
from quarry.store import acl, catalog, layers
from quarry.store.pointer import DOCTOR_HINT, Pointer

if TYPE_CHECKING:
    from quarry.core.plans import AclSource
    from quarry.retrieval.searchindex import IndexSegment, SearchIndex
    from quarry.store.changes import RunChanges

__all__ = ["BaseCatalog", "CatalogWrites", "DeltaCatalog", "IndexInputs", "insert_run", "open_catalog", "remove_files"]


class IndexInputs:
    """What the commit's index build takes from the write session beyond the catalog: the model,
    the vectors (``read``: from the vector table by chunk ids, None when it holds none; the run's
    own, held in ``changes``) and the documents the run changed (quarry/store/changes.py)."""

    def __init__(self, model: str, dim: int, read: Callable[[pa.Array], np.ndarray] | None, changes: RunChanges):
        self.model, self.dim, self.read, self.changes = model, dim, read, changes


class CatalogWrites:
    """The new generation's catalog: its connection, generation and layers, and the writes a run
    makes to it. Subclasses are the two forms (module docstring)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, path: Path, generation: int, chain: tuple[int, ...], private: list[Path]
    ):
        self.con = con
        self.path = path  # the catalog file
        self.generation = generation
        self.chain = chain  # the layers of the generation written, itself last
        self.private = private  # private copies of layers another process held read-write

    def update_documents(self, name: str) -> list[str]:
        """Run ``sql/<name>.sql``: an update of documents rows from a table the caller registered
        (new principals, duplicate assignments); returns the doc_ids changed. A base updates its
        rows in place; a delta writes the changed rows into its layer (``sql/layer_<name>.sql``)."""
        raise NotImplementedError

    def own_chunks(self, check: str, copy: str) -> list[str]:
        """Before an update of chunks rows: make the chunks it changes this catalog's own. A base
        holds every row (nothing to do); a delta copies the sections and chunks an earlier layer
        holds into its layer (``sql/layer_<copy>.sql``, when ``sql/layer_<check>.sql`` finds any).
        Returns the documents copied."""
        raise NotImplementedError

    def statements_name(self, name: str) -> str:
        """The statements file this form runs for ``sql/<name>.sql`` (``layer_<name>`` for a delta)."""
        return name

    def replace_documents(
        self, records: list[DocumentRecord], run_id: str, stored: dict[str, str], written: set[str]
    ) -> None:
        """Replace these documents' rows (``stored``: those the catalog holds, doc_id -> run;
        ``written``: those this session wrote already)."""
        raise NotImplementedError

    def delete_documents(self, doc_ids: list[str]) -> None:
        raise NotImplementedError

    def move_documents(self, table: pa.Table) -> None:
        """New paths of moved files (:func:`quarry.store.layers.moves_table`)."""
        raise NotImplementedError

    def touch_documents(self, table: pa.Table) -> None:
        """New mtimes of unchanged files (:func:`quarry.store.layers.touches_table`)."""
        raise NotImplementedError

    def set_meta(self, key: str, value: str) -> None:
        raise NotImplementedError

    def set_acl_sources(self, sources: dict[str, AclSource]) -> None:
        """Remember each root's permission source."""
        raise NotImplementedError

    def merge_layers(self, force: bool) -> CatalogWrites:
        """Merge layers at commit (``force``: everything into a new base); returns the catalog to
        build the index over (this one, or a new base)."""
        return self

    def rebased(self) -> CatalogWrites:
        """This catalog as a whole one: ``quarry maintain``'s merge of everything."""
        return self

    def moved_chunks(self, table: pa.Table) -> tuple[dict[str, str], pa.Table]:
        """Before a move (``table``: :func:`quarry.store.layers.moves_table`): each moved
        document's root now, and its chunks with their new path (the vector table's update)."""
        roots = dict(
            self.con.execute(catalog.load_sql("document_roots"), [table.column("doc_id").to_pylist()]).fetchall()
        )
        self.con.register("moved_paths", table.select(["doc_id", "path"]))
        try:
            return roots, self.con.execute(catalog.load_sql("moved_chunks")).fetch_arrow_table()
        finally:
            self.con.unregister("moved_paths")

    def write_index(self, inputs: IndexInputs) -> dict[str, Any]:
        """Write the search index of this generation, ``index-<gen>/`` (a whole index for a base,
        the layer's segment for a delta); returns its manifest."""
        from quarry.retrieval import searchindex

        manifest = self.build_index(self.path.parent / searchindex.folder_name(self.generation), inputs)
        logging.getLogger("quarry").info(
            "search index: segment of %d chunks (%d live in %d segments), %d terms, IVF %s, built in %.1f s",
            manifest["segment"]["rows"],
            manifest["rows"],
            len(manifest["segments"]),
            manifest["bm25"]["terms"],
            manifest["dense"]["ivf"] or "off",
            manifest["build_seconds"],
        )
        return manifest

    def build_index(self, folder: Path, inputs: IndexInputs) -> dict[str, Any]:
        raise NotImplementedError

    def drop_private(self) -> None:
        for folder in self.private:
            shutil.rmtree(folder, ignore_errors=True)
        self.private = []

    def close(self) -> None:
        """Close the connection (a full or read-only disk may fail it: the run's own error says so)."""
        try:
            self.con.close()
        except Exception:  # noqa: BLE001, S110 - a full or read-only disk: the run's own error says so
            pass
        self.drop_private()


class BaseCatalog(CatalogWrites):
    """A whole catalog, written in place."""

    def replace_documents(
        self, records: list[DocumentRecord], run_id: str, stored: dict[str, str], written: set[str]
    ) -> None:
        catalog.replace_documents(self.con, records, run_id, stored=stored)

    def delete_documents(self, doc_ids: list[str]) -> None:
        catalog.delete_documents(self.con, doc_ids)

    def move_documents(self, table: pa.Table) -> None:
        _update_from(self.con, "move_documents", "moved_documents", table)

    def touch_documents(self, table: pa.Table) -> None:
        _update_from(self.con, "touch_documents", "touched_documents", table)

    def set_meta(self, key: str, value: str) -> None:
        catalog.set_meta(self.con, key, value)

    def set_acl_sources(self, sources: dict[str, AclSource]) -> None:
        acl.set_sources(self.con, sources)

    def update_documents(self, name: str) -> list[str]:
        return [d for (d,) in self.con.execute(catalog.load_sql(name)).fetchall()]

    def own_chunks(self, check: str, copy: str) -> list[str]:
        return []

    def build_index(self, folder: Path, inputs: IndexInputs) -> dict[str, Any]:
        from quarry.retrieval import searchindex

        if catalog.has_fts(self.con):  # an older quarry's, kept in the catalog: stale now (quarry/store/fts.py)
            catalog.drop_fts(self.con)
        return searchindex.build_into(
            folder, self.con, inputs.read, inputs.model, inputs.dim, generation=self.generation
        )

    @staticmethod
    def write_run(con: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        catalog.migrate(con)  # a catalog from before the newer run columns gains them
        _update_from(con, "insert_run", "new_run", table)


class DeltaCatalog(CatalogWrites):
    """A layer over the committed generation (quarry/store/layers.py)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, path: Path, generation: int, chain: tuple[int, ...], private: list[Path]
    ):
        super().__init__(con, path, generation, chain, private)
        self.prev_chain = chain[:-1]  # the committed generation's layers
        self.merged: list[int] = []  # the earlier layers the commit merged into this one
        self._prev: SearchIndex | None = None  # the committed generation's index, once the commit loaded it
        self._earlier: list[IndexSegment] = []  # its segments this generation keeps

    def update_documents(self, name: str) -> list[str]:
        return layers.rewrite_principals(self.con, self.statements_name(name), self.generation, self.prev_chain[0])

    def own_chunks(self, check: str, copy: str) -> list[str]:
        args = [self.generation, self.prev_chain[0]]
        if self.con.execute(catalog.load_sql(self.statements_name(check)), args).fetchone() is None:
            return []
        return layers.rewrite_principals(self.con, self.statements_name(copy), *args)

    def statements_name(self, name: str) -> str:
        return f"layer_{name}"

    def replace_documents(
        self, records: list[DocumentRecord], run_id: str, stored: dict[str, str], written: set[str]
    ) -> None:
        layers.replace_documents(self.con, records, run_id, self.generation, written)

    def delete_documents(self, doc_ids: list[str]) -> None:
        layers.delete_documents(self.con, doc_ids)

    def move_documents(self, table: pa.Table) -> None:
        layers.rewrite_documents(self.con, "move", table, self.generation, self.prev_chain[0])

    def touch_documents(self, table: pa.Table) -> None:
        layers.rewrite_documents(self.con, "touch", table, self.generation, self.prev_chain[0])

    def set_meta(self, key: str, value: str) -> None:
        layers.set_meta(self.con, key, value)

    def set_acl_sources(self, sources: dict[str, AclSource]) -> None:
        acl.set_sources(self.con, sources, layers.LAYER)

    @staticmethod
    def write_run(con: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
        layers.insert_run(con, table)

    def rebased(self) -> CatalogWrites:
        """Everything into a new base: the live rows written to a whole catalog of this generation,
        which replaces the delta."""
        path = self.path
        tmp = Path(f"{path}.rebase")
        layers.write_base(self.con, layers.alias(self.generation), tmp)
        self.con.close()
        self.drop_private()
        for suffix in ("", ".wal"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        os.replace(tmp, path)
        return BaseCatalog(catalog.connect(path, read_only=False), path, self.generation, (self.generation,), [])

    def merge_layers(self, force: bool) -> CatalogWrites:
        from quarry.retrieval import searchindex

        # the committed generation's index: its segments are the layers before this one
        prev = searchindex.SearchIndex.load(self.path.parent / searchindex.folder_name(self.prev_chain[-1]))
        segments = {s.generation: s for s in prev.segments}
        base_rows = segments[self.prev_chain[0]].n_rows
        counted = self.con.execute(catalog.load_sql("layer_rows")).fetchone()
        assert counted is not None  # a count: one row
        plan = layers.plan_merge(
            base_rows,
            int(np.count_nonzero(prev.bm25.deleted < base_rows)),
            [(g, segments[g].n_rows) for g in self.prev_chain[1:]],
            counted[0],
            force=force,
        )
        if plan is None:
            return self.rebased()
        self.merged = plan
        self.chain = layers.merge(self.con, self.chain, plan)
        self._prev, self._earlier = prev, [segments[g] for g in self.chain[:-1]]
        return self

    def build_index(self, folder: Path, inputs: IndexInputs) -> dict[str, Any]:
        from quarry.retrieval import deltasegment, searchindex

        prev, earlier = self._prev, self._earlier
        assert prev is not None  # merge_layers loaded it
        changes = inputs.changes
        changed = sorted(changes.content_changed | changes.row_changed)
        owners: dict[str, tuple[int | None, int | None]] = {}
        if changed:
            owned = self.con.execute(catalog.load_sql("layer_previous_owners"), [changed]).fetchall()
            owners = {d: (dl, cl) for d, dl, cl in owned}
        dead_rows, dead_docs = deltasegment.deletions(
            prev, earlier, self.prev_chain[0], changes.content_changed, changes.row_changed, owners
        )
        dead_terms = deltasegment.deleted_terms(prev, earlier, dead_rows, self._chunk_texts)
        assert inputs.read is not None  # a delta is written over a committed vector table
        stored = deltasegment.VectorSource(
            prev, set(self.merged), inputs.dim, changes.run_vectors, changes.content_changed, inputs.read
        )
        return searchindex.build_into(
            folder,
            self.con,
            stored,
            inputs.model,
            inputs.dim,
            source=layers.LAYER,
            generation=self.generation,
            earlier=earlier,
            deleted_rows=dead_rows,
            deleted_docs=dead_docs,
            deleted_terms=dead_terms,
        )

    def _chunk_texts(self, generation: int, chunk_ids: list[str]) -> dict[str, str] | None:
        try:
            return layers.chunk_texts(self.con, generation, self.chain[0], chunk_ids)
        except duckdb.Error:
            return None


def open_catalog(folder: Path, base: Pointer | None, generation: int) -> CatalogWrites:
    """The catalog of generation ``generation``: a new store's first (a base), else a delta layer
    over the committed generation ``base`` — or a whole copy of it when this quarry cannot build on
    it (a catalog an older quarry wrote, or an index whose segments are not the catalog's layers).

    Raises :class:`StoreCorrupt` for a committed catalog that cannot be read, and
    :class:`QuarryError` when the new file cannot be written (a full disk, a read-only store): the
    committed state is untouched either way."""
    from quarry.retrieval import searchindex

    path = folder / Pointer.catalog_name(generation)
    if base is None:
        return BaseCatalog(catalog.create(path), path, generation, (generation,), [])
    source = folder / base.catalog
    hint = DOCTOR_HINT.format(store=folder)
    if not source.is_file():
        raise StoreCorrupt(f"{source}, the catalog CURRENT names, is missing: {hint}")
    index = folder / searchindex.folder_name(base.generation)
    # a delta needs the committed generation's segments to be its catalog's layers
    delta = searchindex.is_complete(index) and tuple(searchindex.segment_generations(index)) == (
        base.layers or (base.generation,)
    )
    try:
        con, chain, private, is_delta = layers.open_over(
            folder, base.generation, base.layers or None, generation, delta=delta
        )
    except (OSError, duckdb.IOException) as exc:  # a full disk, a read-only store: the committed state is untouched
        remove_files(path)
        if isinstance(exc, FileNotFoundError) or not _is_write_error(exc):
            raise StoreCorrupt(
                f"{source}, the committed catalog, cannot be opened ({str(exc).strip().splitlines()[0][:200]}): {hint}"
            ) from exc
        raise _unwritable(path, exc) from exc
    except duckdb.Error as exc:
        remove_files(path)
        raise StoreCorrupt(
            f"{source}, the committed catalog, cannot be opened ({str(exc).strip().splitlines()[0][:200]}): {hint}"
        ) from exc
    return (DeltaCatalog if is_delta else BaseCatalog)(con, path, generation, chain, private)


def remove_files(path: Path) -> None:
    """Remove an uncommitted catalog file and what a write left beside it."""
    for suffix in ("", ".wal", ".rebase", ".rebase.wal"):
        try:
            Path(str(path) + suffix).unlink(missing_ok=True)
        except OSError:  # left for the next run's stale-generation sweep
            pass


def insert_run(con: duckdb.DuckDBPyConnection, run_row: RunReport | dict) -> None:
    """Insert one ``runs`` row (into a delta layer's own runs when ``con`` writes one); a dict may
    leave fields out (they take :class:`RunReport`'s defaults)."""
    report = run_row if isinstance(run_row, RunReport) else RunReport.from_row(run_row)
    table = pa.Table.from_pylist([report.to_row()])
    (DeltaCatalog if layers.is_delta(con) else BaseCatalog).write_run(con, table)


def _update_from(con: duckdb.DuckDBPyConnection, sql: str, view: str, table: pa.Table) -> None:
    """Run ``sql/<sql>.sql`` over the Arrow ``table`` registered as ``view``."""
    con.register(view, table)
    try:
        con.execute(catalog.load_sql(sql))
    finally:
        con.unregister(view)


def _is_write_error(exc: BaseException) -> bool:
    """Whether an error opening the new catalog is the disk's (full, read-only), not damage."""
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
