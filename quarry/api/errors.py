"""Every error the API answers is JSON, ``{"error": {"code", "message"}}``: the CLI's one-line message,
never a traceback, a token or a path of the server's own.

| status | code | when |
|---|---|---|
| 400 | ``bad_request`` | malformed JSON; a value the library refuses (a ``where`` it cannot read, windows with segments) |
| 401 | ``unauthorized`` | no bearer key, or not a valid one (unknown, revoked, expired; any, where the store has none) |
| 403 | ``forbidden`` | an admin endpoint (``/v1/runs``) with a key that is not an admin key |
| 404 | ``not_found`` | no such route, document or chunk, or one the caller may not read (never told apart) |
| 405 | ``method_not_allowed`` | e.g. ``GET /v1/search`` |
| 413 | ``payload_too_large`` | a body over the server's limit |
| 422 | ``invalid_request`` | a field of the wrong type or out of range, an unknown field, a body that is no JSON object |
| 429 | ``rate_limited`` | the key's requests per minute are spent; ``Retry-After`` says when to come back |
| 500 | ``internal`` | anything else (logged in full on the server) |
| 503 | ``unavailable`` | the index cannot be opened now (no index yet, a damaged store) |
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from quarry.core.errors import ModelMismatch, NotFound, QuarryError, StoreCorrupt, StoreNotFound, UsageError

log = logging.getLogger("quarry.api")
MAX_MESSAGE = 500
_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    422: "invalid_request",
    429: "rate_limited",
    500: "internal",
    503: "unavailable",
}


class ApiError(Exception):
    """An answer other than 200, with its status, code, one-line message and headers."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code or _STATUS_CODES.get(status, "error")
        self.message = message
        self.headers = headers or {}


def body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def respond(status: int, message: str, code: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(body(code or _STATUS_CODES.get(status, "error"), message), status_code=status, headers=headers)


class Scrubber:
    """Takes the server's own paths out of a message (a store folder, its cache)."""

    def __init__(self, *paths: str):
        self.paths = sorted({str(p).rstrip("/") for p in paths if p and len(str(p)) > 1}, key=len, reverse=True)

    def __call__(self, message: str) -> str:
        text = " ".join(str(message).split())  # one line
        for path in self.paths:
            text = text.replace(path, "<store>")
        if len(text) > MAX_MESSAGE:
            text = text[: MAX_MESSAGE - 1] + "…"
        return text


BODY_SHAPE = "the body must be a JSON object sent as Content-Type: application/json"


def validation_line(errors: Sequence[Mapping[str, Any]], located: bool = False) -> str:
    """One line for pydantic's errors (of a request body, a query, a tool's arguments): each names
    its field, at most three, never pydantic's URL or the rejected value. ``located``: each
    location starts with where in the request it is (FastAPI's ``body``, ``query``, ...)."""
    parts = []
    for e in errors[:3]:
        parts_of = list(e.get("loc", ()))
        if located and parts_of and parts_of[0] in ("body", "query", "path", "header", "cookie"):
            parts_of = parts_of[1:]
        loc = ".".join(str(p) for p in parts_of)
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        if e.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif e.get("type") == "missing":
            msg = "required"
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return " ".join(("; ".join(parts) + more).split())


def _validation_message(exc: RequestValidationError, content_type: str = "") -> tuple[int, str]:
    """(status, one line) for a request the schema refused: 400 for JSON that does not parse."""
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "the body is not valid JSON"
    whole = [e for e in errors if tuple(e.get("loc", ())) == ("body",)]
    if whole:  # no body, or one that is not an object (a list, a string, JSON sent as text/plain)
        kind = content_type.split(";")[0].strip() or "none"
        if whole[0].get("type") == "missing":
            return 422, f"no body: {BODY_SHAPE}"
        if kind != "application/json":
            return 422, f"{BODY_SHAPE} (this one was sent as {kind})"
        return 422, f"{BODY_SHAPE}, not a {type(whole[0].get('input')).__name__.replace('str', 'string')}"
    return 422, validation_line(errors, located=True)


def status_of(exc: QuarryError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, (StoreNotFound, StoreCorrupt, ModelMismatch)):
        return 503
    return 500


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


API_PATHS = ("/v1/", "/mcp", "/fragments/")  # answered in JSON (a fragment's page shows its own errors)


def wants_page(request: Request) -> bool:
    """A browser asking for a page (not the API, not a fragment a page fetches)."""
    return (
        request.method == "GET"
        and "text/html" in request.headers.get("accept", "")
        and not request.url.path.startswith(API_PATHS)
    )


def install(app: FastAPI, scrub: Scrubber, page=None) -> None:
    """Register the handlers that turn every failure into the JSON error shape; with ``page``
    (``page(request, status, message)``), a browser's unknown route or method gets an HTML page."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return respond(exc.status, scrub(exc.message), exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        status, message = _validation_message(exc, request.headers.get("content-type", ""))
        return respond(status, scrub(_CONTROL.sub("?", message)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        message = {404: "no such endpoint", 405: "method not allowed"}.get(exc.status_code, str(exc.detail))
        if page is not None and exc.status_code in (404, 405) and wants_page(request):
            return page(request, exc.status_code, "no such page" if exc.status_code == 404 else message)
        return respond(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(QuarryError)
    async def quarry_error(request: Request, exc: QuarryError):
        status = status_of(exc)
        if status >= 500:
            log.error("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
            message = "the index is unavailable now" if status == 503 else "internal error (see the server log)"
            if isinstance(exc, (StoreNotFound, ModelMismatch)):
                message = scrub(str(exc))
            return respond(status, message)
        return respond(status, scrub(str(exc)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        log.exception("%s %s failed", request.method, request.url.path)
        return respond(500, "internal error (see the server log)")
