"""Cron expression validation for ``quarry serve``, with Prefect's own schedule type.

Validating with the type the deployment will use means quarry accepts exactly what Prefect's
scheduler runs: five-field expressions and the ``@hourly``/``@daily``/… nicknames alike.
"""

from __future__ import annotations

from quarry.core.errors import UsageError


def validate_cron(expr: str, timezone: str | None = None) -> None:
    """Raise :class:`UsageError` unless Prefect's scheduler accepts ``expr``."""
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=expr, timezone=timezone)
    except ValidationError as exc:
        reason = "; ".join(str(err.get("msg", "")).removeprefix("Value error, ") for err in exc.errors())
        raise UsageError(f"--cron {expr!r} is not a valid cron schedule: {reason}") from None
