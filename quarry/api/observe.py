"""What ``quarry api`` tells its operators: Prometheus metrics at ``/metrics``, a span per request,
and denied requests in the store's audit log.

:class:`Observer` wraps the whole ASGI application (one line in :mod:`quarry.api.app`). For every
HTTP request it counts the route (the route's template, never the raw path), method and status,
and names its span ``METHOD <route template>``;
times searches and answers by mode; counts denied (401, 403) and rate-limited (429) requests by
the key's name, never the token (the name of the key whose secret the token carries, whatever its
status; any other token is ``unknown``, with the name of the key its id claims as ``claimed_key``,
which nobody vouches for; a request without one ``none``); and records each denial in the audit log (at most
one entry per key, route and status a minute in each process, with the count of the ones it
stands for). ``GET /metrics`` needs an admin key; a store without keys never serves it on the API's
port (its callers read only public documents, and the index gauges count every document):
``--metrics-port`` serves the same registry on its own loopback port, without a key.

Metrics a scrape reads from the store (the served generation and its age, documents, chunks,
segments, layers) are collected at scrape time from the index the server holds. With ``--workers
N`` each worker process counts its own requests: prometheus_client's multiprocess mode sums them
(``PROMETHEUS_MULTIPROC_DIR``, set by ``quarry api``). docs/operations.md lists every metric.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from quarry.api.errors import ApiError, respond
from quarry.core import tracing
from quarry.core.models import SEARCH_MODES

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

__all__ = ["ApiMetrics", "Observer", "metrics_registry"]

log = logging.getLogger("quarry.api")
TIMED = {"/v1/search": "search", "/v1/answer": "answer"}  # routes whose latency is kept by mode
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_TOKEN_ID = re.compile(r"^\s*bearer\s+qk_([0-9a-f]{12})_", re.IGNORECASE)
_AUDIT_EVERY = 60.0  # seconds between audit entries of the same denial in one process
_BODY_PEEK = 1 << 16  # bytes of a search body read for its mode


class _IndexCollector:
    """Gauges of the served index, read from the store at each scrape."""

    def __init__(self, state):
        self.state = state

    def describe(self):
        return []

    def collect(self):
        try:
            index = self.state.index()
            status = index.status()
            with index.pinned() as snap:
                pointer = snap.pointer
        except Exception as exc:  # noqa: BLE001 - no committed store yet, or out of reach: no index gauges
            log.debug("index gauges unavailable: %s", exc)
            return
        summary = status.get("search_index") or {}
        for name, doc, value in (
            ("quarry_api_served_generation", "The generation this server answers from", pointer.generation),
            (
                "quarry_api_served_generation_age_seconds",
                "Seconds since the served generation was committed",
                max(0.0, time.time() - pointer.committed_at),
            ),
            ("quarry_index_documents", "Documents in the served generation", status.get("documents")),
            ("quarry_index_chunks", "Chunks in the served generation", status.get("chunks")),
            (
                "quarry_index_segments",
                "Search index segments the served generation reads",
                len(summary.get("segments") or []),
            ),
            ("quarry_index_layers", "Catalog layers the served generation reads", len(pointer.layers) or 1),
            (
                "quarry_index_size_bytes",
                "Bytes of the store on disk (the server's local folder)",
                status.get("disk_bytes"),
            ),
        ):
            if value is not None:
                family = GaugeMetricFamily(name, doc)
                family.add_metric([], float(value))
                yield family


class ApiMetrics:
    """The request metrics of one server process, in their own registry."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "quarry_api_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "quarry_api_search_duration_seconds",
            "Latency of searches and answers, by mode",
            ["endpoint", "mode"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.denied = Counter(
            "quarry_api_denied_requests",
            "Requests refused 401 or 403, by key name (claimed_key: the unverified key a bad token names)",
            ["key", "claimed_key", "status"],
            registry=self.registry,
        )
        self.limited = Counter(
            "quarry_api_rate_limited_requests",
            "Requests refused 429 (over the key's rate)",
            ["key"],
            registry=self.registry,
        )


def metrics_registry(metrics: ApiMetrics | None, state) -> CollectorRegistry:
    """What ``/metrics`` exposes: this process's request metrics (all workers' in multiprocess
    mode) and the served index's gauges."""
    registry = CollectorRegistry(auto_describe=False)
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=folder)
    else:
        assert metrics is not None  # one process: its own counters (None only with worker processes)
        registry.register(_Requests(metrics.registry))
    registry.register(_IndexCollector(state))
    return registry


class _Requests:
    def __init__(self, registry):
        self.source = registry

    def describe(self):
        return []

    def collect(self):
        return self.source.collect()


_observers: list = []  # the Observer of this process's app (the last one made)


class _ThisProcess:
    """The ``/metrics`` registry of the app running in this process (``--metrics-port`` with one worker)."""

    def describe(self):
        return []

    def collect(self):
        return _observers[-1].exposed.collect() if _observers else []


def serve_metrics(port: int, state_factory) -> WSGIServer:
    """Serve ``/metrics`` on 127.0.0.1:``port`` without a key (``quarry api --metrics-port``): the
    app of this process, or with worker processes their sum (multiprocess mode) and the index
    gauges of a state made by ``state_factory()``. Returns the server (``shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = metrics_registry(None, state_factory())
    else:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_ThisProcess())
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    return server


class Observer:
    """ASGI middleware: metrics, spans and audit entries of denials around ``app``; ``/metrics``."""

    def __init__(self, app, state, metrics: bool = True):
        self.app = app
        self.state = state
        self.counting = metrics  # False ($QUARRY_API_METRICS=0): no counters, spans or /metrics; denials still audited
        self.metrics = ApiMetrics()
        self.exposed = metrics_registry(self.metrics, state)
        _observers[:] = [self]
        self._audited: dict[tuple, list] = {}  # (key, route, status) -> [last entry time, denials since]
        self._expired_seen: set[str] = set()
        self._guard = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if not self.counting:
            return await self._plain(scope, receive, send)
        if scope["path"] == "/metrics":
            return await self._serve_metrics(scope, receive, send)
        start = time.perf_counter()
        status = [500]
        endpoint = TIMED.get(scope["path"]) if scope["method"] == "POST" else None
        body = bytearray() if endpoint else None

        async def peek():
            message = await receive()
            if body is not None and message["type"] == "http.request" and len(body) < _BODY_PEEK:
                body.extend(message.get("body", b"")[: _BODY_PEEK - len(body)])
            return message

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        # named by the route template once routing found it, never the raw path (ids, high cardinality)
        with tracing.span(f"{scope['method']}", **{"http.request.method": scope["method"]}) as span:
            try:
                await self.app(scope, peek if endpoint else receive, sending)
            finally:
                route = _route_of(scope)
                if span is not None:
                    span.update_name(f"{scope['method']} {route}")
                    span.set_attribute("http.route", route)
                    span.set_attribute("http.response.status_code", status[0])
                self.metrics.requests.labels(route, scope["method"], str(status[0])).inc()
                if endpoint and status[0] < 400:
                    self.metrics.latency.labels(endpoint, _mode(body)).observe(time.perf_counter() - start)
                if status[0] in (401, 403, 429):
                    await self._denied(scope, route, status[0])

    async def _plain(self, scope, receive, send):
        status = [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if status[0] in (401, 403):
                await self._denied(scope, _route_of(scope), status[0])

    async def _serve_metrics(self, scope, receive, send):
        if scope["method"] not in ("GET", "HEAD"):
            return await respond(405, "/metrics answers GET")(scope, receive, send)
        self.state.auth.refresh()
        if not self.state.auth.required:
            # no keys: every caller reads only public documents, and the index gauges count all of them
            await respond(
                403,
                "/metrics of a store without keys is served only on loopback with --metrics-port "
                "(or create an admin key: `quarry keys create NAME --admin`)",
            )(scope, receive, send)
            return await self._denied(scope, "/metrics", 403)
        headers = dict(scope.get("headers") or ())
        try:
            caller = self.state.auth.caller((headers.get(b"authorization") or b"").decode("latin-1") or None)
        except ApiError as exc:
            await respond(exc.status, exc.message, headers=exc.headers)(scope, receive, send)
            return await self._denied(scope, "/metrics", exc.status)
        if not caller.admin:
            await respond(
                403,
                "/metrics needs an admin key (`quarry keys create NAME --admin`), or serve it on "
                "loopback with --metrics-port",
            )(scope, receive, send)
            return await self._denied(scope, "/metrics", 403)
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import Response

        payload = await run_in_threadpool(generate_latest, self.exposed)
        self.metrics.requests.labels("/metrics", scope["method"], "200").inc()
        await Response(payload, media_type=CONTENT_TYPE_LATEST)(scope, receive, send)

    async def _denied(self, scope, route: str, status: int) -> None:
        key, claimed = self._key_of(scope)
        name = key.name if key is not None else ("none" if not _authorization(scope) else "unknown")
        if status == 429:
            self.metrics.limited.labels(name).inc()
            return
        self.metrics.denied.labels(name, claimed, str(status)).inc()
        client = (scope.get("client") or (None,))[0]
        now = time.monotonic()
        with self._guard:
            seen = self._audited.setdefault((name, claimed, route, status), [float("-inf"), 0])
            seen[1] += 1
            if now - seen[0] < _AUDIT_EVERY:
                return
            count, seen[0], seen[1] = seen[1], now, 0
            expired = key is not None and key.status() == "expired" and key.id not in self._expired_seen
            if expired:
                self._expired_seen.add(key.id)
        from starlette.concurrency import run_in_threadpool

        await run_in_threadpool(self._audit, name, claimed, route, status, scope["method"], client, count, expired)

    def _audit(self, name, claimed, route, status, method, client, count, expired) -> None:
        from quarry.api.keys import KeyRing
        from quarry.store.audit import AuditLog, record

        reason = {401: "unauthenticated", 403: "forbidden"}.get(status, str(status))
        details = {"route": route, "method": method, "status": status, "reason": reason, "requests": count}
        if claimed:
            details["claimed_key"] = claimed  # what the token's id says, unverified: never blame that key
        record(self.state.store, "access.denied", details, key=name, client=client)
        if expired:
            try:
                KeyRing(self.state.auth.ring.where, audit=AuditLog(self.state.store)).note_expired()
            except Exception as exc:  # noqa: BLE001 - recording must not fail the request
                log.warning("could not record expired keys in the audit log: %s", exc)

    def _key_of(self, scope) -> tuple:
        """(the key whose secret the token carries, or None; the name its id claims when it does not, or "")."""
        authorization = _authorization(scope)
        m = _TOKEN_ID.match(authorization)
        if m is None:
            return None, ""
        ring = self.state.auth.ring
        key = ring.identify(authorization.strip().partition(" ")[2].strip())
        if key is not None:
            return key, ""
        claimed = ring.get(m.group(1))
        return None, claimed.name if claimed is not None else ""


def _authorization(scope) -> str:
    return (dict(scope.get("headers") or ()).get(b"authorization") or b"").decode("latin-1")


def _route_of(scope) -> str:
    """The route template that served the request (``/v1/documents/{doc_id}``), never the raw path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path:
        return path
    if scope["path"] == "/mcp" or scope["path"].startswith("/mcp/"):
        return "/mcp"
    return "unmatched"


def _mode(body: bytearray | None) -> str:
    try:
        mode = json.loads(bytes(body or b"{}")).get("mode", "hybrid")
    except (ValueError, AttributeError):
        return "unknown"
    return mode if mode in SEARCH_MODES else "other"
