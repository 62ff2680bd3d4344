"""Discovery and planning tasks: the store's read of its committed catalog
(:func:`quarry.store.reader.committed_catalog`) handed to the plain functions of
:mod:`quarry.ingest.plan`."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.ingest.guard import GuardLimits
from quarry.ingest.plan import Discovery, RunPlan, discover_roots, plan_run
from quarry.store.reader import committed_catalog


@task(name="discover", cache_policy=NO_CACHE)
def discover_files(roots: list[str], include: tuple, exclude: tuple, store=None, rehash: bool = False) -> Discovery:
    """Walk the roots: readable files, unsupported ones, files that could not be read, and each root's scan.
    Files the committed catalog of ``store`` knows are not read again while their size and mtime match,
    unless ``rehash``."""
    catalog = committed_catalog(store) if store is not None else None
    found = discover_roots(roots, include, exclude, catalog, rehash)
    get_run_logger().info(
        "discovered %d readable files, %d of unsupported types, %d unreadable; roots: %s",
        len(found.files),
        len(found.unsupported),
        len(found.unreadable),
        ", ".join(f"{s.root} ({s.status})" for s in found.scans),
    )
    return found


@task(name="plan", cache_policy=NO_CACHE)
def plan_changes(
    store,
    discovery: Discovery,
    full: bool,
    fingerprint: str,
    model: str,
    dim: int,
    limits: GuardLimits,
    patterns: tuple[str, ...] = (),
) -> RunPlan:
    """Diff the discovered files against the committed catalog, through the deletion guard."""
    # the catalog discovery read, or, for a discovery made without the store, the store's now
    catalog = discovery.catalog if discovery.catalog is not None else committed_catalog(store)
    planned = plan_run(
        discovery, catalog, full=full, fingerprint=fingerprint, model=model, dim=dim, limits=limits, patterns=patterns
    )
    logger = get_run_logger()
    logger.info("plan: %s%s", planned.plan.counts(), f" (rebuild: {planned.rebuild})" if planned.rebuild else "")
    for failure in planned.verdict.failures:
        logger.warning("root %s: %s", failure.path, failure.error)
    if planned.verdict.refused:
        logger.error("%s", planned.verdict.message())
    return planned
