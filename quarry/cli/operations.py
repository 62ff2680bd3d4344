"""``quarry audit`` (list the audit log, ``verify`` its chain): flags in, :mod:`quarry.store.audit` out.

Registered on the ``quarry`` group by :func:`register` (one line in ``main.py``), like
:mod:`quarry.cli.serving`.
"""

from __future__ import annotations

import json

import click


def _line(entry: dict) -> str:
    who = entry.get("who") or {}
    by = who.get("key") or who.get("user") or "?"
    details = " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in (entry.get("details") or {}).items())
    return f"{entry['seq']:>6} {entry['time'][:19]}Z {entry['event']:<24} {by}@{who.get('host', '?')}:{who.get('pid', '?')} {details}"


def register(group: click.Group, *, db_option, json_option, handle_errors) -> None:
    """Add ``audit`` to ``group``."""

    @group.group(invoke_without_command=True)
    @db_option
    @click.option(
        "--since",
        default=None,
        metavar="WHEN",
        help="Only entries from then on: 30d, 12h, 90m ago, or a date/time (2026-11-01).",
    )
    @json_option
    @click.pass_context
    @handle_errors
    def audit(ctx, db, since, as_json):
        """The store's audit log: key, access, permission, delete, guard, rollback and maintenance
        events, oldest first, each chained to the one before by its hash."""
        if ctx.invoked_subcommand is not None:
            return
        from quarry.store.audit import AuditLog, parse_since
        from quarry.store.handle import open_store

        entries = AuditLog(open_store(db)).entries(parse_since(since))
        if as_json:
            click.echo(json.dumps(entries, indent=2))
            return
        if not entries:
            click.echo("no audit entries")
        for entry in entries:
            click.echo(_line(entry))

    @audit.command(name="verify")
    @db_option
    @json_option
    @handle_errors
    def audit_verify(db, as_json):
        """Check the chain: exit 1 when an entry was edited, removed or reordered."""
        from quarry.store.audit import AuditLog
        from quarry.store.handle import open_store

        log = AuditLog(open_store(db))
        result = log.verify()
        if as_json:
            click.echo(json.dumps(result.to_dict(), indent=2))
        elif result.ok:
            click.echo(f"audit log {log}: {result.entries} entries, chain intact (last hash {result.last_hash})")
        else:
            for problem in result.problems:
                click.echo(f"audit log {log}: {problem}", err=True)
        if not result.ok:
            raise SystemExit(1)
