"""The web pages of ``quarry api``: search, a document as quarry cut it, the runs and the status.

Each page is one or two library calls as the signed-in key (:mod:`quarry.api.web.session`): a
search is the API's own :class:`~quarry.api.schemas.SearchRequest` run and serialised as
``/v1/search`` answers it, a document is :meth:`quarry.Index.document`, the runs are
:meth:`quarry.Index.runs`. Pages are rendered on the server by Jinja2 templates (no front-end
build); ``static/web.js`` only swaps the results of a search in place and loads a hit's context
on demand, and every page works without it.

Fragments (``/fragments/...``) are pieces of a page the script fetches; they check the key like
pages do and answer 401 when it is gone.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
import re
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from pydantic import ValidationError

from quarry.api.deps import state_of
from quarry.api.errors import ApiError, Scrubber, status_of
from quarry.api.routes.documents import checked_id
from quarry.api.web import session, views
from quarry.api.web.session import COOKIE, SignIn
from quarry.core.errors import QuarryError

log = logging.getLogger("quarry.api")
router = APIRouter(include_in_schema=False)
STATIC = ("web.css", "web.js", "icon.svg")
_TYPES = {"css": "text/css; charset=utf-8", "js": "text/javascript; charset=utf-8", "svg": "image/svg+xml"}
# Nothing of a page comes from another host; inline SVG needs no style or script of its own.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
COMPRESS_FROM = 4096  # bytes of HTML: smaller pages go as they are
SEARCH_FIELDS = (
    "q",
    "k",
    "mode",
    "fusion",
    "where",
    "path",
    "type",
    "since",
    "until",
    "window",
    "segments",
    "explain",
    "rerank",
)


def _static_version() -> dict[str, str]:
    files = resources.files(__package__) / "static"
    return {name: hashlib.sha256((files / name).read_bytes()).hexdigest()[:12] for name in STATIC}


@functools.cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("quarry.api.web", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        size=views.size,
        seconds=views.seconds,
        when=views.when,
        ago=views.ago,
        pages=views.pages,
        number=views.number,
        marked=marked,
        took=views.took,
        code=code,
    )
    versions = _static_version()
    env.globals["static"] = lambda name: f"/static/{name}?v={versions[name]}"
    return env


_TICKED = re.compile(r"`([^`]+)`")


def code(message: str) -> Markup:
    """A message's `quoted` commands as <code> (messages are the CLI's, which quote with backticks)."""
    return Markup(_TICKED.sub(lambda m: f"<code>{m.group(1)}</code>", str(escape(message))))


def marked(pieces) -> Markup:
    """``(text, matched)`` pieces as HTML, the matched ones in ``<mark>``."""
    return Markup("".join(f"<mark>{escape(t)}</mark>" if m else str(escape(t)) for t, m in pieces))


def render(request: Request, template: str, status: int = 200, **context) -> HTMLResponse:
    context.setdefault("who", getattr(request.state, "caller", None))
    context.setdefault("auth_required", state_of(request).auth.required)
    context["path"] = request.url.path
    html = environment().get_template(template).render(**context).encode("utf-8")
    headers = dict(HEADERS)
    if len(html) > COMPRESS_FROM and "gzip" in request.headers.get("accept-encoding", ""):
        html = gzip.compress(html, compresslevel=5)  # pages of runs and long documents shrink 5-10 times
        headers.update({"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
    return HTMLResponse(html, status_code=status, headers=headers)


def html_errors(fragment: bool = False):
    """Turn what a page's library calls raise into a page (or a fragment) with the right status:
    no key -> the sign-in page (401 for a fragment), a key short of rights -> 403, nothing the
    caller may read -> 404, a refused value -> 400, the index out of reach -> 503."""

    def wrap(fn):
        @functools.wraps(fn)
        def page(request: Request, *args, **kwargs):
            try:
                request.state.caller = session.caller(request)
                return fn(request, *args, **kwargs)
            except SignIn as exc:
                if fragment:
                    return render(request, "fragment_signin.html", status=401)
                response = RedirectResponse(session.sign_in_url(request), status_code=303, headers=HEADERS)
                if exc.expired:
                    response.delete_cookie(COOKIE, path="/")
                return response
            except ApiError as exc:
                return _error(request, exc.status, exc.message, fragment, exc.headers)
            except QuarryError as exc:
                status = status_of(exc)
                if status >= 500:
                    log.error("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
                    message = (
                        "the index cannot be read now (no index yet, or a damaged store)"
                        if status == 503
                        else "internal error (see the server log)"
                    )
                else:
                    message = str(exc)
                return _error(request, status, message, fragment)

        return page

    return wrap


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    """The page of a route or method the server does not have, for a browser (the API answers JSON)."""
    return _error(request, status, message, fragment=False)


def _error(request: Request, status: int, message: str, fragment: bool, headers: dict | None = None) -> HTMLResponse:
    text = Scrubber(*state_of(request).paths())(message)
    response = render(
        request, "fragment_error.html" if fragment else "error.html", status=status, status_code=status, message=text
    )
    response.headers.update(headers or {})
    return response


# --- search ---------------------------------------------------------------------------------------


def _form(request: Request) -> dict:
    """The search form as the page shows it back (strings, as typed)."""
    params = request.query_params
    form: dict[str, Any] = {name: params.get(name, "") for name in SEARCH_FIELDS}
    form["explain"] = params.get("explain") in ("1", "on", "true")
    return form


def _request(form: dict):
    """The API's search request from the form; ``(request, None)`` or ``(None, message)``."""
    from quarry.api.schemas import SearchRequest

    body = {"query": form["q"], "explain": form["explain"]}
    for name in ("mode", "fusion", "where", "path", "since", "until", "window", "segments", "rerank"):
        value = form[name].strip()
        if value:
            body[name] = value
    if form["type"].strip():
        body["type"] = [t.strip().lstrip(".") for t in form["type"].replace(",", " ").split() if t.strip()]
    if form["k"].strip():
        body["k"] = form["k"].strip()
    try:
        return SearchRequest(**body), None
    except ValidationError as exc:
        parts = []
        for error in exc.errors()[:3]:
            where = ".".join(str(p) for p in error.get("loc", ()))
            parts.append(f"{where}: {str(error.get('msg', 'invalid')).removeprefix('Value error, ')}")
        return None, "; ".join(parts)


def _results(request: Request, form: dict) -> dict:
    """Run the form's search as the caller; the template's context (answer or error)."""
    context: dict[str, Any] = {
        "form": form,
        "answer": None,
        "error": None,
        "rerankers": state_of(request).config.rerankers,
    }
    if not form["q"].strip():
        return context
    search, error = _request(form)
    if error:
        context["error"] = error
        return context
    try:
        answer = search.run(
            state_of(request).index(), request.state.caller.principals, tuple(state_of(request).config.rerankers)
        )
    except QuarryError as exc:
        if status_of(exc) != 400:
            raise
        context["error"] = str(exc)
        return context
    query = form["q"]
    terms = views.query_terms(query)
    for item in answer["results"]:
        item["marked"] = views.split_marked(views.snippet(item["text"]), terms)
        item["header_marked"] = views.split_marked(item["header"], terms)
    for item in (answer.get("windows") or []) + (answer.get("segments") or []):
        item["marked"] = views.split_marked(views.snippet(item["text"]), terms)
    context["answer"] = answer
    return context


@router.get("/")
@html_errors()
def search_page(request: Request):
    form = _form(request)
    context = _results(request, form)
    return render(request, "search.html", status=400 if context["error"] else 200, **context)


@router.get("/fragments/results")
@html_errors(fragment=True)
def results_fragment(request: Request):
    form = _form(request)
    context = _results(request, form)
    return render(request, "fragment_results.html", status=400 if context["error"] else 200, **context)


@router.get("/fragments/context/{chunk_id}")
@html_errors(fragment=True)
def context_fragment(request: Request, chunk_id: str, n: int = 1, q: str = ""):
    n = max(0, min(int(n), 5))
    chunk = (
        state_of(request)
        .index()
        .chunk(checked_id("chunk", chunk_id), neighbours=n, principals=request.state.caller.principals)
    )
    window = chunk.get("window") or {
        "text": chunk["text"],
        "first_chunk": chunk["chunk_index"],
        "last_chunk": chunk["chunk_index"],
    }
    before, hit, after = views.split_around(window["text"], chunk["text"])
    terms = views.query_terms(q) if q.strip() else frozenset()
    marked: dict[str, Any] = {
        name: views.split_marked(text, terms) if terms else [(text, False)]
        for name, text in (("before", before), ("hit", hit), ("after", after))
    }
    return render(request, "fragment_context.html", chunk=chunk, window=window, **marked)


# --- documents ------------------------------------------------------------------------------------


@router.get("/documents/{doc_id}")
@html_errors()
def document_page(request: Request, doc_id: str, chunk: str = "", q: str = "", start: int | None = None):
    hit = None
    if chunk:
        owner, _, index = chunk.rpartition(":")
        hit = int(index) if owner == doc_id and index.isdigit() else None
    first = views.document_window(10**9, hit, start)[0]
    last = first + views.CHUNKS_PER_PAGE - 1
    doc = (
        state_of(request)
        .index()
        .document(checked_id("document", doc_id), request.state.caller.principals, text=(first, last))
    )
    n = len(doc["chunks"])
    first, last = views.document_window(n, hit, first)
    return render(
        request,
        "document.html",
        doc=doc,
        q=q,
        hit=hit,
        first=first,
        last=last,
        n_chunks=n,
        per_page=views.CHUNKS_PER_PAGE,
        blocks=views.layout(doc, first, last, hit, q),
        outline=views.outline(doc),
        chunk_id=chunk,
    )


# --- runs -----------------------------------------------------------------------------------------


def _admin(request: Request, what: str = "the runs name files") -> None:
    if not request.state.caller.admin:
        raise ApiError(403, f"{what} of every permission: they need an admin key (`quarry keys create NAME --admin`)")


@router.get("/runs")
@html_errors()
def runs_page(request: Request, limit: int = 100):
    _admin(request)
    limit = max(1, min(int(limit), 1000))
    index = state_of(request).index()
    with index.pinned() as snap:
        runs = index.runs(limit)
        generation = snap.pointer.generation
        evals = index.evals()[-limit:][::-1]  # newest first: the quality trend across generations
    return render(
        request, "runs.html", runs=runs, chart=views.stage_chart(runs), generation=generation, limit=limit, evals=evals
    )


@router.get("/runs/{run_id}")
@html_errors()
def run_page(request: Request, run_id: str):
    _admin(request)
    run = state_of(request).index().run(run_id[:200])
    return render(request, "run.html", run=run, stages=views.stage_rows(run.get("durations") or {}))


# --- corpus report --------------------------------------------------------------------------------


@router.get("/corpus")
@html_errors()
def corpus_page(request: Request):
    """``quarry corpus report`` as a page: duplicates by folder, languages, personal data by kind,
    boilerplate per root. It counts every document, so it is an admin page like the runs."""
    _admin(request, "the corpus report counts documents")
    return render(request, "corpus.html", report=state_of(request).index().corpus_report())


# --- status ---------------------------------------------------------------------------------------


@router.get("/status")
@html_errors()
def status_page(request: Request):
    info = state_of(request).index().status(principals=request.state.caller.principals)
    return render(request, "status.html", info=info)


# --- signing in -----------------------------------------------------------------------------------


@router.get("/login")
async def login_page(request: Request, next: str = "/"):
    return render(request, "login.html", next=session.safe_next(next), error=None, who=None)


@router.post("/login")
async def login(request: Request):
    if not session.same_origin(request):
        return render(
            request,
            "login.html",
            status=403,
            next="/",
            who=None,
            error="sign-in refused: the form was not sent from this server's page",
        )
    form = await request.form()
    token, target = str(form.get("token", "")), session.safe_next(str(form.get("next", "/")))
    try:
        who = session.check(request, token)
    except ApiError as exc:
        status = exc.status if exc.status in (401, 429) else 400
        return render(
            request,
            "login.html",
            status=status,
            next=target,
            who=None,
            error="that is not a valid API key (unknown, revoked or expired)" if status == 401 else exc.message,
        )
    response = RedirectResponse(target, status_code=303, headers=HEADERS)
    if state_of(request).auth.required:
        response.set_cookie(
            COOKIE,
            token.strip(),
            max_age=session.MAX_AGE,
            path="/",
            httponly=True,
            samesite="strict",
            secure=session.secure(request),
        )
    log.info("web sign-in: key %s", who.name)
    return response


@router.post("/logout")
async def logout(request: Request):
    response = RedirectResponse("/login", status_code=303, headers=HEADERS)
    if session.same_origin(request):
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=session.secure(request))
    return response


@router.get("/static/{name}")
async def static(request: Request, name: str):
    if name not in STATIC:
        raise ApiError(404, "no such file")
    data, packed = _static_file(name)
    headers = {
        "Cache-Control": "public, max-age=31536000, immutable",
        "X-Content-Type-Options": "nosniff",
        "Vary": "Accept-Encoding",
    }
    if "gzip" in request.headers.get("accept-encoding", ""):
        data, headers["Content-Encoding"] = packed, "gzip"
    return Response(data, media_type=_TYPES[name.rsplit(".", 1)[1]], headers=headers)


@functools.cache
def _static_file(name: str) -> tuple[bytes, bytes]:
    data = (resources.files(__package__) / "static" / name).read_bytes()
    return data, gzip.compress(data, compresslevel=9, mtime=0)
