"""Document permissions in the catalog: ``documents.principals`` and each root's source (``acl_roots``).

An update touches only those two: no chunk or vector changes. In a whole catalog the documents
rows are updated in place; in a delta layer (quarry/store/layers.py) the changed documents rows are
written to the layer, as for a move, and the commit's index segment holds those documents (their
chunks stay in the segments that had them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from quarry.core import gcpause, paths
from quarry.core.plans import AclSource
from quarry.core.principals import PUBLIC, normalise
from quarry.core.sqlfiles import load_sql

if TYPE_CHECKING:
    from quarry.store.catalog import WritingCatalog

_WANTED = "wanted_acl"


def _columns(con, table: str) -> set[str]:
    try:
        return {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
    except Exception:  # noqa: BLE001 - a catalog from before the table existed
        return set()


def sources(con) -> dict[str, AclSource]:
    """``{root: AclSource}`` the catalog remembers (empty for a catalog from before permissions)."""
    if not _columns(con, "acl_roots"):
        return {}
    return {root: AclSource(source, rules) for root, source, rules in con.execute(load_sql("acl_sources")).fetchall()}


def set_sources(con, changed: dict[str, AclSource], schema: str = "main") -> None:
    """Remember each root's source in the ``acl_roots`` table of ``schema`` (``layer``: the catalog
    layer ``con`` writes, quarry/store/layers.py)."""
    for root, source in changed.items():
        con.execute(load_sql("acl_set_source", schema), [root, source.source, source.rules])


class StoredPrincipals(Mapping):
    """``{document path: principals}`` of a catalog, read as its paths plus the documents whose
    principals are not exactly ``public``: most catalogs are all public, and a run compares each
    discovered file with this map, so 50,000 public documents cost a set of their paths, not
    50,000 rows of lists turned into tuples (0.47 s to 0.07-0.08 s measured on a store of 50,000
    documents)."""

    def __init__(self, paths: set[str], other: dict[str, tuple[str, ...] | None]):
        self._paths, self._other = paths, other

    def __getitem__(self, path: str) -> tuple[str, ...] | None:
        if path not in self._paths:
            raise KeyError(path)
        return self._other.get(path, _PUBLIC)

    def get(self, path: str, default=None):
        """The principals of ``path``, else ``default``: one call per discovered file of a run."""
        if path not in self._paths:
            return default
        return self._other.get(path, _PUBLIC)

    def __contains__(self, path: object) -> bool:
        return path in self._paths

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


_PUBLIC = (PUBLIC,)


def counts(store) -> dict:
    """``{documents, restricted, principals}`` of the committed catalog of ``store`` (zeros before its
    first commit): what the audit log records before and after a run changes permissions."""
    from quarry.store.pointer import read_pointer
    from quarry.store.reader import open_snapshot

    if read_pointer(store) is None:
        return {"documents": 0, "restricted": 0, "principals": 0}
    snap = open_snapshot(store, search_index=False)
    try:
        if "principals" not in _columns(snap.con, "documents"):
            n = len(stored(snap.con))  # a catalog from before permissions: all public
            return {"documents": n, "restricted": 0, "principals": 1 if n else 0}
        row = snap.con.execute(load_sql("acl_counts")).fetchone()
        assert row is not None  # counts: one row
        return {"documents": row[0], "restricted": row[1], "principals": row[2]}
    finally:
        snap.close()


def stored(con) -> StoredPrincipals:
    """``{document path: principals}`` (None: not decided; a catalog from before permissions: all public)."""
    paths = set(con.execute("SELECT path FROM documents").fetch_arrow_table().column(0).to_pylist())
    if "principals" not in _columns(con, "documents"):
        return StoredPrincipals(paths, {})
    rows = con.execute(load_sql("acl_principals")).fetchall()
    other = {path: (tuple(p) if p is not None else None) for path, p in rows}
    return StoredPrincipals(paths, other)


def _update(cat: WritingCatalog, sql: str, key: str, wanted: dict[str, tuple[str, ...]]) -> list[str]:
    if not wanted:
        return []
    table = pa.table(
        {key: list(wanted), "principals": [list(p) for p in wanted.values()]},
        schema=pa.schema([(key, pa.string()), ("principals", pa.list_(pa.string()))]),
    )
    cat.con.register(_WANTED, table)
    try:
        return cat.update_documents(sql)
    finally:
        cat.con.unregister(_WANTED)


def apply(cat: WritingCatalog, wanted: dict[str, tuple[str, ...]]) -> list[str]:
    """Set the principals of the documents at these paths (real file names; stored in display form)
    where they differ in the catalog ``cat`` writes (quarry/store/catalog_writes.py); returns the
    doc_ids changed."""
    return _update(cat, "acl_apply", "path", {paths.display(p): tuple(v) for p, v in wanted.items()})


def apply_to_documents(cat: WritingCatalog, wanted: Mapping[str, Sequence[str]]) -> list[str]:
    """Set the principals of these documents (by doc_id) where they differ; returns the doc_ids
    changed (as :func:`apply`)."""
    return _update(cat, "acl_apply_documents", "doc_id", {d: normalise(v) for d, v in wanted.items()})


def committed_permissions(store) -> tuple[dict[str, AclSource], Mapping[str, tuple[str, ...] | None]]:
    """What the committed catalog of ``store`` holds about permissions: ``({root: AclSource},
    {document path: principals})`` (:func:`sources`, :func:`stored`; both empty before its first
    commit), what a run's permission plan compares with (quarry/ingest/acl.py, plan_permissions)."""
    from quarry.store.pointer import read_pointer
    from quarry.store.reader import open_snapshot

    if read_pointer(store) is None:
        return {}, {}
    with gcpause.paused():  # a row per document, no cycles: quarry/core/gcpause.py
        snap = open_snapshot(store, search_index=False)
        try:
            return sources(snap.con), stored(snap.con)
        finally:
            snap.close()
