"""Discovery and planning tasks."""

from __future__ import annotations

from datetime import timezone

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.core import paths
from quarry.ingest.discover import discover
from quarry.core.models import FileError, FileInfo
from quarry.ingest.plan import CatalogDoc, Plan, make_plan
from quarry.core.sqlfiles import load_sql
from quarry.store.layout import read_pointer
from quarry.store.reader import open_snapshot


@task(name="discover", cache_policy=NO_CACHE)
def discover_files(roots: list[str], include: tuple, exclude: tuple
                   ) -> tuple[list[FileInfo], list[FileInfo], list[FileError]]:
    """Walk the roots; returns (readable files, unsupported files, files that could not be read)."""
    errors: list[FileError] = []
    readable, unsupported = discover(roots, include, exclude, errors=errors)
    get_run_logger().info("discovered %d readable files, %d of unsupported types, %d unreadable", len(readable),
                          len(unsupported), len(errors))
    return readable, unsupported, errors


def committed_catalog(store) -> tuple[list[CatalogDoc], dict[str, str]]:
    """The committed documents and meta of a store (empty for a new store)."""
    if read_pointer(store) is None:
        return [], {}
    snap = open_snapshot(store)
    try:
        columns = {r[0] for r in snap.con.execute("DESCRIBE documents").fetchall()}
        sql = load_sql("plan_documents")
        if "path_bytes" not in columns:  # a catalog committed before the column existed
            sql = sql.replace(", path_bytes FROM", ", NULL AS path_bytes FROM")
        rows = snap.con.execute(sql).fetchall()
        meta = dict(snap.con.execute(load_sql("get_meta")).fetchall())
    finally:
        snap.close()
    docs = [CatalogDoc(doc_id=r[0], path=paths.from_catalog(r[1], r[6]), sha256=r[3],
                       mtime=r[4].replace(tzinfo=timezone.utc).timestamp()) for r in rows]
    return docs, meta


@task(name="plan", cache_policy=NO_CACHE)
def plan_changes(store, files: list[FileInfo], roots: list[str], rebuild: bool, fingerprint: str, model: str,
                 dim: int, unreadable: frozenset = frozenset()) -> tuple[Plan, str]:
    """Diff discovered files against the committed catalog; returns (plan, why a rebuild).

    ``unreadable``: paths that exist but could not be hashed this run; their documents stay.
    """
    docs, meta = committed_catalog(store)
    reason = "--full" if rebuild else ""
    if docs and not reason:
        if meta.get("content_fingerprint") not in (None, fingerprint):
            reason = "chunking settings changed"
        elif meta.get("model") and (meta.get("model"), meta.get("dim")) != (model, str(dim)):
            reason = f"embedding model changed ({meta.get('model')} -> {model})"
    plan = make_plan(files, docs, roots, rebuild=bool(reason), unreadable=unreadable)
    get_run_logger().info("plan: %s%s", plan.counts(), f" (rebuild: {reason})" if reason else "")
    return plan, reason
