"""``quarry api``, ``quarry keys`` and ``quarry mcp``: flags in, the library (``quarry.api``) out.

Registered on the ``quarry`` group by :func:`register` (one line in ``main.py``), which hands over
main's shared options, so that this module never imports ``quarry.cli.main`` (``python -m
quarry.cli.main`` runs that module as ``__main__``; importing it again would build a second group).
"""

from __future__ import annotations

import json
import sys

import click


def _ring(db, keys_file):
    """The key ring of the store at ``db``, recording its changes in the store's audit log."""
    from quarry.api.keys import open_ring
    from quarry.store.audit import AuditLog
    from quarry.store.handle import open_store

    store = open_store(db)
    ring = open_ring(store, keys_file)  # a mistyped --db fails here, before anything is written
    ring.audit = AuditLog(store)
    return ring


def _say(message: str, level: str = "info") -> None:
    """A server's own line on stderr: text, or a JSON log line under ``--log-format json``."""
    from quarry.core.environment import environment

    if environment().log_format == "json":
        import logging

        from quarry.core.logs import JsonFormatter

        record = logging.LogRecord("quarry.api", getattr(logging, level.upper()), __file__, 0, message, None, None)
        click.echo(JsonFormatter().format(record), err=True)
    else:
        click.echo(message, err=True)


def register(group: click.Group, *, db_option, json_option, handle_errors) -> None:
    """Add ``api``, ``keys`` and ``mcp`` to the ``quarry`` group, with main's ``--db``, ``--json`` and
    error handling."""
    keys_file_option = click.option(
        "--keys-file",
        default=None,
        envvar="QUARRY_KEYS_FILE",
        metavar="FILE",
        help="Keep the keys in FILE instead of with the store ($QUARRY_KEYS_FILE).",
    )

    @click.command()
    @db_option
    @click.option(
        "--host",
        default="127.0.0.1",
        show_default=True,
        help="Address to listen on. Anything but loopback needs API keys (or --insecure-no-auth).",
    )
    @click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
    @click.option(
        "--workers",
        type=click.IntRange(1, 256),
        default=1,
        show_default=True,
        help="Server processes; each maps the index once (docs/api.md, Deployment).",
    )
    @click.option(
        "--rate-limit",
        type=click.IntRange(0, 10_000_000),
        default=None,
        help="Requests per minute per key unless the key has its own (default 600; 0 = unlimited; "
        "$QUARRY_API_RATE_LIMIT).",
    )
    @click.option(
        "--rerank",
        "rerankers",
        multiple=True,
        metavar="SPEC",
        help="A reranker requests may ask for, e.g. cross-encoder:/models/ms-marco (repeatable; none by default).",
    )
    @click.option(
        "--max-body",
        type=click.IntRange(1024, 1 << 30),
        default=1 << 20,
        show_default=True,
        help="Largest request body in bytes (413 above).",
    )
    @click.option("--no-mcp", is_flag=True, help="Do not serve MCP at /mcp.")
    @click.option(
        "--insecure-no-auth",
        is_flag=True,
        help="Allow a non-loopback --host for a store without API keys (every caller anonymous: public "
        "documents only).",
    )
    @click.option(
        "--answer-rate-limit",
        type=click.IntRange(0, 10_000_000),
        default=60,
        show_default=True,
        help="Answers per minute per key unless the key has its own (0 = unlimited; answers cost model calls).",
    )
    @keys_file_option
    @click.option(
        "--log-level",
        "server_log_level",
        type=click.Choice(["critical", "error", "warning", "info", "debug"]),
        default="info",
        show_default=True,
        help="uvicorn's log level (info logs each request).",
    )
    @click.option(
        "--metrics-port",
        type=click.IntRange(1, 65535),
        default=None,
        help="Also serve /metrics on this port of 127.0.0.1, without a key (on the API's port it "
        "needs an admin key once the store has keys).",
    )
    @handle_errors
    def api(
        db,
        host,
        port,
        workers,
        rate_limit,
        rerankers,
        max_body,
        no_mcp,
        insecure_no_auth,
        answer_rate_limit,
        keys_file,
        server_log_level,
        metrics_port,
    ):
        """Serve the index over HTTP: /v1/search, /v1/answer, /v1/documents, /v1/chunks, /v1/status, /v1/runs, /mcp,
        and web pages at / (search, documents, runs, status; docs/web.md).

        OpenAPI at /docs. Needs `Authorization: Bearer <token>` from `quarry keys create` once the store
        has a key (the web pages: sign in with one); see docs/api.md.
        """

        from quarry.api.app import ApiConfig
        from quarry.api.keys import KeyRing, key_store
        from quarry.api.server import check_host, serve
        from quarry.core.errors import UsageError
        from quarry.search.rerank import get_reranker
        from quarry.store.handle import open_store

        for spec in rerankers:  # a reranker is built on first use: check each spec now, not at a request
            try:
                get_reranker(spec)
            except UsageError as exc:
                raise UsageError(f"--rerank {spec}: {exc}") from None
        if rate_limit is None:
            from quarry.core.environment import environment

            rate_limit = environment().api_rate_limit
        store = open_store(db)
        ring = KeyRing(key_store(store, keys_file))
        ring.refresh()
        warning = check_host(host, ring.required, insecure_no_auth)
        if warning:
            _say(f"warning: {warning}", "warning")
        config = ApiConfig(
            db=db,
            keys_file=keys_file,
            rate_limit=rate_limit,
            workers=workers,
            max_body=max_body,
            rerankers=list(rerankers),
            mcp=not no_mcp,
            answer_rate_limit=answer_rate_limit,
        )
        _say(
            f"serving {store.folder if db is None else db} on http://{host}:{port} "
            f"({workers} worker{'s' if workers > 1 else ''}; keys {'required' if ring.required else 'none'})"
            + (f"; /metrics on http://127.0.0.1:{metrics_port}" if metrics_port else "")
        )
        serve(config, host=host, port=port, log_level=server_log_level, metrics_port=metrics_port)

    @click.group()
    def keys():
        """API keys for `quarry api` (only a salted hash of each is stored)."""

    @keys.command(name="create")
    @click.argument("name")
    @db_option
    @click.option(
        "--principal",
        "principals",
        multiple=True,
        metavar="PRINCIPAL",
        help="Who the key reads as, e.g. group:finance or user:alice (repeatable; public is implied).",
    )
    @click.option("--admin", is_flag=True, help="Read every document and list runs.")
    @click.option(
        "--expires",
        default=None,
        metavar="WHEN",
        help="Expiry: 30d, 12h, 2w, 90m from now, or a date (2027-01-31). Default: never.",
    )
    @click.option(
        "--rate-limit",
        type=click.IntRange(0, 10_000_000),
        default=None,
        help="Requests per minute for this key (0 = unlimited; default: the server's).",
    )
    @click.option("--no-answers", is_flag=True, help="Search only: no /v1/answer or MCP answer (answers cost money).")
    @click.option(
        "--answer-rate-limit",
        type=click.IntRange(0, 10_000_000),
        default=None,
        help="Answers per minute for this key (0 = unlimited; default: the server's).",
    )
    @keys_file_option
    @json_option
    @handle_errors
    def keys_create(
        name, db, principals, admin, expires, rate_limit, no_answers, answer_rate_limit, keys_file, as_json
    ):
        """Create a key NAME and print its token (shown once)."""
        from quarry.api.keys import check_new, parse_expiry

        check_new(name, principals, admin, rate_limit)
        ring = _ring(db, keys_file)
        key, token = ring.create(
            name,
            principals,
            admin=admin,
            expires=parse_expiry(expires),
            rate_limit=rate_limit,
            answers=not no_answers,
            answer_rate_limit=answer_rate_limit,
        )
        if as_json:
            click.echo(
                json.dumps(
                    {"name": key.name, "token": token, **{k: v for k, v in key.public().items() if k not in ("name",)}},
                    indent=2,
                )
            )
            return
        click.echo(token)
        who = "everything (admin)" if key.admin else ", ".join(key.principals + ["public"])
        click.echo(
            f"key {key.name} ({key.id}) reads as {who}"
            + (f", expires {key.public()['expires']}" if key.expires else "")
            + ". The token above is shown once: store it now.",
            err=True,
        )

    @keys.command(name="list")
    @db_option
    @keys_file_option
    @json_option
    @handle_errors
    def keys_list(db, keys_file, as_json):
        """Keys of the store: name, id, principals, status; never a token."""
        ring = _ring(db, keys_file)
        ring.note_expired()
        items = [k.public() for k in ring.list()]
        if as_json:
            click.echo(json.dumps(items, indent=2))
            return
        if not items:
            click.echo("no keys (`quarry keys create NAME` makes one)")
            return
        rows = [
            (
                k["name"],
                k["id"],
                k["status"],
                "admin" if k["admin"] else ",".join(k["principals"] + ["public"]),
                k["expires"] or "never",
                "default" if k["rate_limit"] is None else f"{k['rate_limit']}/min",
            )
            for k in items
        ]
        header = ("NAME", "ID", "STATUS", "READS AS", "EXPIRES", "RATE")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())

    @keys.command(name="revoke")
    @click.argument("name")
    @db_option
    @keys_file_option
    @json_option
    @handle_errors
    def keys_revoke(name, db, keys_file, as_json):
        """Revoke the key NAME (or of that id): refused from the next request on."""
        revoked = _ring(db, keys_file).revoke(name)
        if as_json:
            click.echo(json.dumps([k.public() for k in revoked], indent=2))
            return
        for k in revoked:
            click.echo(f"revoked {k.name} ({k.id})")

    @click.command()
    @db_option
    @click.option(
        "--as",
        "as_principals",
        multiple=True,
        metavar="PRINCIPAL",
        help="Read as this principal (repeatable; public is implied).",
    )
    @click.option(
        "--admin",
        is_flag=True,
        help="Read every document, as the store's owner. A store with API keys needs --as or --admin; "
        "one without reads everything unless --as is given.",
    )
    @keys_file_option
    @handle_errors
    def mcp(db, as_principals, admin, keys_file):
        """Serve the index to an MCP client over stdio (tools: search, get_document, get_context, status, answer)."""
        from quarry.api.auth import Caller
        from quarry.api.keys import KeyRing, key_store
        from quarry.api.mcp import build
        from quarry.core.errors import UsageError
        from quarry.search.query import open as open_index
        from quarry.store.handle import open_store

        if admin and as_principals:
            raise UsageError("give --as or --admin, not both")
        store = open_store(db)
        if not as_principals and not admin:
            ring = KeyRing(key_store(store, keys_file))
            ring.refresh()
            if ring.required:  # the store is served with permissions: reading everything must be asked for
                raise UsageError(
                    "this store has API keys: give --as PRINCIPAL to read as someone, or --admin "
                    "to read every document as its owner"
                )
        index = open_index(store)
        caller = Caller.owner(list(as_principals) or None)
        server = build(lambda: index, lambda ctx: caller)
        try:
            server.run("stdio")
        finally:
            index.close()
        sys.stdout.flush()

    for command in (api, keys, mcp):
        group.add_command(command)
