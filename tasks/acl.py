"""Permission tasks: what each document's principals should be, and setting them (no re-parsing)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from quarry.tasks.load import _writer

from quarry.core.models import FileInfo
from quarry.ingest.acl import PermissionPlan
from quarry.store import acl


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
    plan = acl.plan_for_run(store, files, roots, acl_source, acl_rules, rewritten)
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
