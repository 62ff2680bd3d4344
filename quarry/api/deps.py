"""What the endpoints of ``quarry api`` are handed (FastAPI dependencies): the server's
configuration and shared state, the opened index, the authenticated caller, and the JSON response
of the library's serialiser. Routers import these; :mod:`quarry.api.app` assembles routers and
state, so no router imports the app.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import Depends, Request
from fastapi.responses import Response

from quarry.api.auth import DEFAULT_RATE_LIMIT, Authenticator, Caller
from quarry.api.errors import ApiError
from quarry.api.keys import KeyRing, key_store

if TYPE_CHECKING:
    from quarry.api.answering import AnswerGate
    from quarry.search.query import Index

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
    answer_rate_limit: int = 60  # answers per minute per key (a key's own limit wins); quarry/api/answering.py
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
        from quarry.store.handle import open_store

        self.config = config
        self.store = open_store(config.db)
        self.auth = Authenticator(KeyRing(key_store(self.store, config.keys_file)), config.rate_limit, config.workers)
        self._index: Index | None = None
        self._answers: AnswerGate | None = None
        self._guard = threading.Lock()
        self._warming: threading.Thread | None = None

    def index(self):
        if self._index is None:
            with self._guard:
                if self._index is None:
                    from quarry.search.query import open as open_index

                    self._index = open_index(self.store)
        return self._index

    def start_warming(self) -> None:
        """:meth:`warm` in a thread of its own, so that the worker starts serving at once."""
        self._warming = threading.Thread(target=self.warm, name="quarry-warm", daemon=True)
        self._warming.start()

    def warm(self) -> None:
        """Open the index and its committed generation now (each worker, at start, in a thread of its
        own): a worker then has a generation at hand from the start, to answer from while the
        store's pointer cannot be read (an object-store outage), rather than only once it has served
        a request. A store with no index yet, or one that cannot be read now, stays to be opened on
        the first request, which then says why."""
        try:
            self.index().generation  # noqa: B018 - reading it loads the committed snapshot
        except Exception as exc:  # noqa: BLE001 - warming is best effort: the first request opens it again and reports
            logging.getLogger("quarry").debug("index not opened at start: %s", exc)

    def answer_gate(self):
        """Who may have answers, and how many a minute (:class:`quarry.api.answering.AnswerGate`)."""
        if self._answers is None:
            from quarry.api.answering import AnswerGate

            with self._guard:
                if self._answers is None:
                    self._answers = AnswerGate(self.auth.ring, self.config.answer_rate_limit, self.config.workers)
        return self._answers

    def close(self) -> None:
        if self._warming is not None:  # an index the warm-up is opening is closed here too
            self._warming.join(timeout=30)
        if self._index is not None:
            self._index.close()

    def paths(self) -> list[str]:
        """Where the store is, in every form a message could name it (never shown to a client)."""
        folder, url = self.store.folder, self.store.url
        out = [str(folder), str(folder.resolve())]
        if url is not None:
            out.append(str(url))
            if url.scheme == "file":
                out.append("/" + url.prefix)
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
