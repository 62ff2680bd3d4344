"""Discovery and planning tasks."""

from __future__ import annotations

from datetime import timezone

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.discover import discover
from quarry.models import FileInfo
from quarry.plan import CatalogDoc, Plan, make_plan
from quarry.sqlfiles import load_sql
from quarry.store.layout import read_pointer
from quarry.store.reader import open_snapshot


@task(name="discover", cache_policy=NO_CACHE)
def discover_files(roots: list[str], include: tuple, exclude: tuple) -> tuple[list[FileInfo], list[FileInfo]]:
    """Walk the roots; returns (readable files, unsupported files)."""
    readable, unsupported = discover(roots, include, exclude)
    get_run_logger().info("discovered %d readable files, %d of unsupported types", len(readable), len(unsupported))
    return readable, unsupported


def committed_catalog(store) -> tuple[list[CatalogDoc], dict[str, str]]:
    """The committed documents and meta of a store (empty for a new store)."""
    if read_pointer(store) is None:
        return [], {}
    snap = open_snapshot(store)
    try:
        rows = snap.con.execute(load_sql("plan_documents")).fetchall()
        meta = dict(snap.con.execute(load_sql("get_meta")).fetchall())
    finally:
        snap.close()
    docs = [CatalogDoc(doc_id=r[0], path=r[1], sha256=r[3], mtime=r[4].replace(tzinfo=timezone.utc).timestamp()) for r in rows]
    return docs, meta


@task(name="plan", cache_policy=NO_CACHE)
def plan_changes(store, files: list[FileInfo], roots: list[str], rebuild: bool, fingerprint: str, model: str,
                 dim: int) -> tuple[Plan, str]:
    """Diff discovered files against the committed catalog; returns (plan, why a rebuild)."""
    docs, meta = committed_catalog(store)
    reason = "--full" if rebuild else ""
    if docs and not reason:
        if meta.get("content_fingerprint") not in (None, fingerprint):
            reason = "chunking settings changed"
        elif meta.get("model") and (meta.get("model"), meta.get("dim")) != (model, str(dim)):
            reason = f"embedding model changed ({meta.get('model')} -> {model})"
    plan = make_plan(files, docs, roots, rebuild=bool(reason))
    get_run_logger().info("plan: %s%s", plan.counts(), f" (rebuild: {reason})" if reason else "")
    return plan, reason
