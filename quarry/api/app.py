"""The FastAPI application of ``quarry api``: one router per area, over one opened :class:`quarry.Index`.

``create_app(ApiConfig(db=...))`` builds it; FastAPI's dependency injection hands each endpoint the
index (:func:`index_of`) and the caller (:func:`caller_of`), and the endpoints call the library and
nothing else. Routers: ``health`` (``/healthz``, ``/readyz``), ``search`` (``/v1/search``),
``documents`` (``/v1/documents/{id}``, ``/v1/chunks/{id}``), ``admin`` (``/v1/status``,
``/v1/runs``), and the web pages (:mod:`quarry.api.web`: ``/``, ``/documents/{id}``, ``/runs``,
``/status``, signed in with a key kept in a cookie); the MCP server (:mod:`quarry.api.mcp`) answers
at ``/mcp``.

Each request pins one committed generation (``Index`` does it per call) and names it in its answer
(``generation`` in the JSON, ``X-Quarry-Generation`` in the headers); a commit is picked up by
the next request, for local stores and stores on object storage alike.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from quarry.api.deps import (  # noqa: F401 - the server's configuration and dependencies, re-exported
    CONFIG_ENV,
    DEFAULT_MAX_BODY,
    ApiConfig,
    State,
    admin_of,
    caller_of,
    index_of,
    json_response,
    log,
    state_of,
)
from quarry.api.errors import Scrubber, install, respond
from quarry.api.observe import Observer
from quarry.core.environment import environment

if TYPE_CHECKING:
    from starlette.types import ASGIApp

DOCS_ASSETS = "/docs/assets"  # Swagger UI's script, style and icon


class BodyLimit:
    """413 for a body over ``limit`` bytes: by its Content-Length, or counted as it streams in (the
    body is read here, at most ``limit`` bytes of it, and handed on whole: request bodies of this API
    are small JSON)."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or ()).get(b"content-length")
        too_big = respond(413, f"the body is over {self.limit} bytes")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                return await respond(400, "the Content-Length header is not a number")(scope, receive, send)
            if declared > self.limit:
                return await too_big(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await too_big(scope, receive, send)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(config: ApiConfig | None = None) -> FastAPI:
    """The application serving ``config.db``."""
    from quarry.api.routes import admin, answer, documents, health, search
    from quarry.api.web import answers, pages

    config = config or ApiConfig()
    state = State(config)
    mcp_http = None
    if config.mcp:
        from quarry.api.mcp import McpHttp

        mcp_http = McpHttp(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state.start_warming()
        if mcp_http is None:
            yield
        else:
            async with mcp_http.running():
                yield
        state.close()

    # Swagger UI from the fastapi-offline package's files, so /docs reaches no other host (no ReDoc:
    # its footer loads a logo from its maker's site)
    app = FastAPIOffline(
        title="quarry",
        summary="Hybrid search over a quarry index (BM25 + vectors), with document permissions.",
        version=_version(),
        lifespan=lifespan,
        static_url=DOCS_ASSETS,
        redoc_url=None,
        swagger_ui_parameters={"validatorUrl": None},
    )
    app.state.quarry = state
    install(app, Scrubber(*state.paths()), page=pages.error_page)
    for router in (
        health.router,
        search.router,
        answer.router,
        documents.router,
        admin.router,
        pages.router,
        answers.router,
    ):
        app.include_router(router)
    asgi: ASGIApp = BodyLimit(app, config.max_body)
    if mcp_http is not None:
        asgi = mcp_http.mount(asgi)
    app.state.asgi = asgi = Observer(asgi, state, metrics=environment().api_metrics)  # quarry/api/observe.py
    return app


def asgi_app(config: ApiConfig | None = None):
    """The whole ASGI application: the API, the body limit and ``/mcp``."""
    return create_app(config).state.asgi


def app_from_env():
    """The uvicorn factory of ``quarry api`` (each worker process builds its own app)."""
    return asgi_app(ApiConfig.from_env())


def _version() -> str:
    from quarry import __version__

    return __version__
