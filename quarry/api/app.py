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
import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response

from quarry.api.auth import DEFAULT_RATE_LIMIT, Authenticator, Caller
from quarry.api.errors import ApiError, Scrubber, install, respond
from quarry.api.keys import KeyRing, key_store

log = logging.getLogger("quarry.api")
CONFIG_ENV = "QUARRY_API_CONFIG"  # how `quarry api --workers N` hands the config to its worker processes
DEFAULT_MAX_BODY = 1 << 20  # bytes


@dataclass
class ApiConfig:
    """What a server serves and how: everything ``quarry api`` takes besides host and port."""

    db: str | None = None
    host: str = "127.0.0.1"  # where it listens (a loopback server refuses other Host headers at /mcp)
    keys_file: str | None = None
    rate_limit: int = DEFAULT_RATE_LIMIT  # requests per minute per key (a key's own limit wins)
    workers: int = 1
    max_body: int = DEFAULT_MAX_BODY
    rerankers: list[str] = field(default_factory=list)  # rerank specs requests may name
    mcp: bool = True

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ApiConfig:
        raw = os.environ.get(CONFIG_ENV)
        if not raw:
            raise RuntimeError(f"{CONFIG_ENV} is not set: start the server with `quarry api`")
        return cls(**json.loads(raw))


class State:
    """What the endpoints share in one worker process: the index (opened on first need, so a
    server can start before the first index run) and the authenticator."""

    def __init__(self, config: ApiConfig):
        from quarry.core.settings import store_path

        self.config = config
        self.store = store_path(config.db)
        self.auth = Authenticator(KeyRing(key_store(self.store, config.keys_file)), config.rate_limit,
                                  config.workers)
        self._index = None
        self._guard = threading.Lock()

    def index(self):
        if self._index is None:
            with self._guard:
                if self._index is None:
                    from quarry.search.query import open as open_index

                    self._index = open_index(self.store)
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()

    def paths(self) -> list[str]:
        """Where the store is, in every form a message could name it (never shown to a client)."""
        from quarry.store.remote import remote_of

        out = [str(self.store), str(Path(self.store).resolve())]
        remote = remote_of(self.store)
        if remote is not None:
            out.append(str(remote.url))
            if remote.url.scheme == "file":
                out.append("/" + remote.url.prefix)
        if self.config.keys_file:
            out.append(str(Path(self.config.keys_file).expanduser().absolute()))
        return out


def state_of(request: Request) -> State:
    return request.app.state.quarry


def index_of(request: Request):
    """The opened index (a dependency of every endpoint that reads it)."""
    return state_of(request).index()


def caller_of(request: Request) -> Caller:
    """The authenticated caller (401 without a valid key once the store has keys; 429 over its rate)."""
    return state_of(request).auth.caller(request.headers.get("authorization"))


def admin_of(caller: Caller = Depends(caller_of)) -> Caller:
    if not caller.admin:
        raise ApiError(403, "this endpoint needs an admin key (`quarry keys create NAME --admin`)")
    return caller


def json_response(data, status: int = 200) -> Response:
    """JSON from the library's serialiser, with the generation it was read from in a header."""
    from quarry.search.serialize import dumps

    headers = {}
    if isinstance(data, dict) and data.get("generation") is not None:
        headers["X-Quarry-Generation"] = str(data["generation"])
    return Response(dumps(data), status_code=status, media_type="application/json", headers=headers)


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
    from quarry.api.routes import admin, documents, health, search
    from quarry.api.web import pages

    config = config or ApiConfig()
    state = State(config)
    mcp_http = None
    if config.mcp:
        from quarry.api.mcp import McpHttp

        mcp_http = McpHttp(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if mcp_http is None:
            yield
        else:
            async with mcp_http.running():
                yield
        state.close()

    app = FastAPI(title="quarry", summary="Hybrid search over a quarry index (BM25 + vectors), with "
                  "document permissions.", version=_version(), lifespan=lifespan)
    app.state.quarry = state
    install(app, Scrubber(*state.paths()))
    for router in (health.router, search.router, documents.router, admin.router, pages.router):
        app.include_router(router)
    asgi = BodyLimit(app, config.max_body)
    if mcp_http is not None:
        asgi = mcp_http.mount(asgi)
    app.state.asgi = asgi
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
