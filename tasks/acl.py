"""Permission tasks: what each document's principals should be (the store's read of its committed
permissions handed to :func:`quarry.ingest.acl.plan_permissions`), and setting them (no re-parsing)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from quarry.tasks.load import _writer

from quarry.core.models import FileInfo
from quarry.core.plans import PermissionPlan
from quarry.ingest.acl import plan_permissions, requested
from quarry.store.acl import committed_permissions


@task(name="plan-permissions", cache_policy=NO_CACHE)
def plan_run_permissions(
    store,
    files: list[FileInfo],
    roots: list[str],
    acl_source: str = "",
    acl_rules: str = "",
    rewritten: set[str] | None = None,
) -> PermissionPlan:
    """Principals for every discovered file (``--acl`` / ``--acl-rules``, else what each root had),
    compared with the committed catalog; only those that change or whose rows the run rewrites
    (``rewritten``) travel to the writer."""
    asked = requested(acl_source, acl_rules)  # a bad rules file fails here, before the store is read
    stored_sources, stored_principals = committed_permissions(store)
    plan = plan_permissions(files, roots, asked, stored_sources, stored_principals, rewritten)
    get_run_logger().info(
        "permissions: %d documents change; sources %s", plan.changed, {root: str(s) for root, s in plan.sources.items()}
    )
    return plan


@task(name="apply-permissions", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def apply_permissions(run_id: str, plan: PermissionPlan) -> int:
    """Write the principals that differ (the run's new documents included) and each root's source."""
    n = _writer(run_id).set_principals(plan.wanted, plan.sources)
    get_run_logger().info("set the principals of %d documents", n)
    return n
