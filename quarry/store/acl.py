"""Document permissions in the catalog: ``documents.principals`` and each root's source (``acl_roots``).

An update touches only those two: no chunk, vector or search index row changes, so a run whose
only news is a permission change copies the catalog, updates the documents whose principals differ
and links the previous generation's index files (:func:`quarry.retrieval.searchindex.link`).
"""

from __future__ import annotations

import pyarrow as pa

from quarry.core import paths
from quarry.core.principals import normalise
from quarry.core.sqlfiles import load_sql
from quarry.ingest.acl import AclSource

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


def set_sources(con, changed: dict[str, AclSource]) -> None:
    """Remember each root's source."""
    for root, source in changed.items():
        con.execute(load_sql("acl_set_source"), [root, source.source, source.rules])


def stored(con) -> dict[str, tuple[str, ...] | None]:
    """``{document path: principals}`` (None: not decided; a catalog from before permissions: all public)."""
    if "principals" not in _columns(con, "documents"):
        return {path: ("public",) for (path,) in con.execute("SELECT path FROM documents").fetchall()}
    return {path: (tuple(p) if p is not None else None) for path, p in con.execute(load_sql("acl_principals")).fetchall()}


def _update(con, sql: str, key: str, wanted: dict[str, tuple[str, ...]]) -> int:
    if not wanted:
        return 0
    table = pa.table({key: list(wanted), "principals": [list(p) for p in wanted.values()]},
                     schema=pa.schema([(key, pa.string()), ("principals", pa.list_(pa.string()))]))
    con.register(_WANTED, table)
    try:
        row = con.execute(load_sql(sql)).fetchone()
    finally:
        con.unregister(_WANTED)
    return int(row[0]) if row else 0


def apply(con, wanted: dict[str, tuple[str, ...]]) -> int:
    """Set the principals of the documents at these paths (real file names; stored in display form)
    where they differ; returns how many documents changed."""
    return _update(con, "acl_apply", "path", {paths.display(p): tuple(v) for p, v in wanted.items()})


def apply_to_documents(con, wanted: dict[str, tuple[str, ...]]) -> int:
    """Set the principals of these documents (by doc_id) where they differ; returns how many changed."""
    return _update(con, "acl_apply_documents", "doc_id", {d: normalise(v) for d, v in wanted.items()})


def plan_for_run(store, files, roots: list[str], acl_source: str = "", acl_rules: str = ""):
    """Principals for every discovered file (``--acl`` / ``--acl-rules``, else what each root had),
    compared with the committed catalog of ``store``: a :class:`~quarry.ingest.acl.PermissionPlan`."""
    from quarry.ingest.acl import plan_permissions, requested
    from quarry.store.pointer import read_pointer
    from quarry.store.reader import open_snapshot

    asked = requested(acl_source, acl_rules)
    stored_sources, stored_principals = {}, {}
    if read_pointer(store) is not None:
        snap = open_snapshot(store)
        try:
            stored_sources, stored_principals = sources(snap.con), stored(snap.con)
        finally:
            snap.close()
    return plan_permissions(files, roots, asked, stored_sources, stored_principals)
