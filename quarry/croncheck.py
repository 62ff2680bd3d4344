"""Cron expression validation for ``quarry serve``, before Prefect starts."""

from __future__ import annotations

from datetime import datetime

from quarry.errors import UsageError


def validate_cron(expr: str) -> None:
    """Raise :class:`UsageError` unless ``expr`` is a valid five-field cron expression."""
    from cronsim import CronSim, CronSimError

    if len(expr.split()) != 5:
        raise UsageError(f"--cron {expr!r} must have five fields: minute hour day-of-month month day-of-week")
    try:
        CronSim(expr, datetime.now())
    except CronSimError as exc:
        raise UsageError(f"--cron {expr!r} is not a valid cron expression: {exc}") from None
