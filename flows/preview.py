"""What an index run would do, without Prefect and without writing anything: the one dry-run path
of ``quarry index --dry-run``, ``quarry.index(dry_run=True)`` and the index flow's ``dry_run``."""

from __future__ import annotations

from pathlib import Path

from quarry.core.settings import Settings

__all__ = ["preview"]


def preview(roots: list[str], store: Path, settings: Settings, *, full: bool = False) -> dict:
    """What a run would do, without Prefect and without writing anything (see :func:`index`)."""
    from quarry.ingest.acl import plan_permissions, requested
    from quarry.ingest.embedders import describe
    from quarry.ingest.guard import GuardLimits, pattern_flags
    from quarry.ingest.plan import discover_roots, plan_run
    from quarry.ingest.process import content_fingerprint
    from quarry.store.acl import committed_permissions
    from quarry.store.layout import new_run_id
    from quarry.store.reader import committed_catalog

    model, dim = describe(settings)
    catalog = committed_catalog(store)
    found = discover_roots(roots, settings.include, settings.exclude, catalog, full or settings.rehash)
    planned = plan_run(
        found,
        catalog,
        full=full,
        fingerprint=content_fingerprint(settings),
        model=model,
        dim=dim,
        limits=GuardLimits.from_settings(settings),
        patterns=pattern_flags(settings.include, settings.exclude),
    )
    asked = requested(settings.acl, settings.acl_rules)
    permissions = plan_permissions(found.files, roots, asked, *committed_permissions(store))
    return {**planned.dry_run_report(new_run_id(), found), "permissions": permissions.changed}
