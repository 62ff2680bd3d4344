"""The MCP server (official ``mcp`` SDK): ``quarry mcp`` over stdio, and ``/mcp`` of ``quarry api``
(streamable HTTP, stateless, JSON answers; the same bearer keys and rate limits as ``/v1``).

Tools: ``search``, ``get_document``, ``get_context``, ``status``, and ``answer`` (an answer with
checked citations; through ``/mcp``, under the key's answer permission and answer rate limit). Each calls the library as the
caller (an HTTP request's key; over stdio, the owner of the store or ``--as``), so the same
permissions hold, and answers with the JSON of ``/v1`` (:mod:`quarry.search.serialize`).
Stateless HTTP keeps no session between requests, so any worker process can answer any request.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from quarry.api.answering import AnswerRequest
from quarry.api.auth import Caller
from quarry.api.errors import ApiError, Scrubber, validation_line
from quarry.api.schemas import MAX_QUERY, MAX_WINDOW, SearchRequest
from quarry.core.errors import QuarryError

INSTRUCTIONS = """\
quarry searches an indexed collection of documents (PDF, Office, Markdown, mail, ...) with hybrid
BM25 + vector search. Start with `search` (a few keywords or a question); each result names its
document (doc_id, path, title), section, pages and chunk_id. Use `get_context` on a chunk_id to read
the text around a hit, `get_document` for a document's outline (sections and chunk ids), and
`status` for what the index holds. `answer` writes an answer to a question with checked citations
([n] markers naming the passages) through the server's language model, a paid call unless nothing
readable answers it (status not_found): prefer `search` when passages will do. You see only documents
your key may read."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# answer changes nothing here but reaches an external system: the server's (paid) chat model
ASKS_A_MODEL = ToolAnnotations(read_only_hint=True, open_world_hint=True)


def _arg(name: str, model=SearchRequest):
    """The type of the HTTP request's field ``name``, with its bounds and description: the ``search``
    and ``answer`` tools' parameters are the fields of :class:`~quarry.api.schemas.SearchRequest` and
    :class:`~quarry.api.answering.AnswerRequest`, made from the declared arguments
    (:mod:`quarry.search.parameters`)."""
    info = model.model_fields[name]
    return Annotated[(info.annotation, *info.metadata, Field(description=info.description))]


# the tools' parameters, in this order: a subset of the request's fields, each taken as HTTP takes it
SEARCH_ARGS = (
    "query",
    "k",
    "mode",
    "where",
    "path",
    "type",
    "since",
    "until",
    "segments",
    "window",
    "explain",
    "collapse",
)
ANSWER_ARGS = ("question", "k", "mode", "where", "path", "type", "since", "until")


def _takes(model, names: tuple[str, ...]):
    """A decorator giving a tool function of ``(ctx=None, **args)`` the signature the SDK reads its
    parameters from: ``names``, typed, bounded, described and defaulted as ``model``'s fields, then ``ctx``."""

    def decorate(fn):
        params = []
        for name in names:
            info = model.model_fields[name]
            default = inspect.Parameter.empty if info.is_required() else info.default
            params.append(
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=_arg(name, model))
            )
        params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context | None))
        fn.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])
        return fn

    return decorate


DocId = Annotated[str, Field(max_length=200, description="A document's doc_id, from a search result.")]
ChunkId = Annotated[str, Field(max_length=200, description="A chunk's chunk_id, from a search result.")]
Side = Annotated[
    int, Field(ge=0, le=MAX_WINDOW, description=f"Chunks of the same document on this side (0-{MAX_WINDOW}).")
]
ContextQuery = Annotated[
    str | None,
    Field(
        max_length=MAX_QUERY,
        description="Instead of neighbours: the relevant segments of the chunk's document for this query.",
    ),
]


class _Server(MCPServer):
    """The SDK's server, its argument errors in one line that names the field (the SDK's own are
    pydantic's, several lines with a URL)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None):
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"{name}: {validation_line(exc.__cause__.errors())}") from exc.__cause__
            raise


def build(
    index_of: Callable[[], Any],
    caller_of: Callable[[Context | None], Caller],
    rerankers: tuple[str, ...] = (),
    scrub: Scrubber | None = None,
    answer_gate: Callable[[Caller], None] | None = None,
) -> MCPServer:
    """An MCP server over the index ``index_of()``, each tool call made as ``caller_of(ctx)``;
    ``answer_gate(caller)`` raises :class:`ApiError` when that caller may not have an answer now."""
    from quarry import __version__

    scrub = scrub or Scrubber()
    server = _Server("quarry", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    def call(fn):
        try:
            return fn()
        except ValidationError as exc:
            raise ToolError(scrub(validation_line(exc.errors()))) from None
        except QuarryError as exc:
            raise ToolError(scrub(str(exc))) from None

    @server.tool(annotations=READ_ONLY)
    @_takes(SearchRequest, SEARCH_ARGS)
    def search(ctx: Context | None = None, **args) -> dict[str, Any]:
        """Search the documents for passages relevant to `query` (keywords or a question); best first.

        Returns `results`: each with score, chunk_id, doc_id, path, title, section, page_start/page_end and
        the passage text, and `match`: the query words its text holds (bm25) and its cosine (vector).
        `weak: true` means no result really matched (pure noise ranked first): say nothing was found.
        Options: `k` results; `mode` hybrid (default), vector (meaning) or bm25 (exact words, codes,
        numbers); filters `where` (e.g. "file_type = 'pdf'", "mtime >= 2024-01-01",
        "metadata.author = 'Kim'"; a list must all hold), `path` globs (e.g. "reports/**"), `type` (e.g.
        "pdf"), `since`/`until` (YYYY-MM-DD); `window` "B,A" (or N for both sides) adds chunks of context
        around every hit (in `windows`); `segments` returns whole relevant passages spanning several chunks
        instead (in `segments`); copies of a passage in other files take one place, listed in the hit's
        `copies` (`collapse` false lists every copy as its own hit).
        """
        return call(lambda: SearchRequest(**args).run(index_of(), caller_of(ctx).principals, rerankers))

    @server.tool(annotations=READ_ONLY)
    def get_document(doc_id: DocId, ctx: Context | None = None) -> dict[str, Any]:
        """A document by its doc_id (from a search result): path, title, type, size, dates, metadata, its
        sections (title, level, pages) and its chunks (chunk_id, section, pages; no text: use get_context)."""
        return call(lambda: index_of().document(doc_id, principals=caller_of(ctx).principals))

    @server.tool(annotations=READ_ONLY)
    def get_context(
        chunk_id: ChunkId, before: Side = 2, after: Side = 2, query: ContextQuery = None, ctx: Context | None = None
    ) -> dict[str, Any]:
        """The text around a chunk (a chunk_id from a search result): the chunk and `before`/`after` chunks
        of its document (0-50 each), merged into one passage in `window`. With `query`, instead the
        relevant segments of that chunk's document for the query (whole passages, best first)."""

        def run():
            index = index_of()
            principals = caller_of(ctx).principals
            with index.pinned():
                chunk = index.chunk(chunk_id, neighbours=(before, after), principals=principals)
                if not query:
                    return chunk
                request = SearchRequest.model_validate(
                    {"query": query, "k": 10, "doc": [chunk["doc_id"]], "segments": "balanced"}
                )
                out = request.run(index, principals, rerankers)
                out["chunk"] = {k: chunk[k] for k in ("chunk_id", "doc_id", "path", "title", "chunk_index")}
                return out

        return call(run)

    @server.tool(annotations=READ_ONLY)
    def status(ctx: Context | None = None) -> dict[str, Any]:
        """What the index holds (of what you may read): documents, sections, chunks, the embedding model
        and the committed generation answers come from."""
        return call(lambda: index_of().status(principals=caller_of(ctx).principals))

    @server.tool(annotations=ASKS_A_MODEL)
    @_takes(AnswerRequest, ANSWER_ARGS)
    def answer(ctx: Context | None = None, **args) -> dict[str, Any]:
        """Answer `question` from the documents you may read, with citations checked against the passages.

        Returns `status` (answered, not_found: nothing readable answers it and no model was asked, refused,
        error), `text` with [n] markers, `citations` (number, doc_id, path, title, pages, chunk_id, the quoted
        passage), `evidence` (the numbered passages the model was given), `dropped` citations and `uncited`
        sentences. Filters as for `search`: `where`, `path` globs, `type` (e.g. pdf), `since`/`until`. Costs a model call unless not_found.
        """
        from quarry.api.answering import log_answer

        def run():
            caller = caller_of(ctx)
            if answer_gate is not None:
                try:
                    answer_gate(caller)
                except ApiError as exc:
                    raise ToolError(exc.message) from None
            data = AnswerRequest(**args).run(index_of(), caller.principals)
            log_answer(caller, data)
            return data

        return call(run)

    return server


# --- over HTTP, inside `quarry api` ----------------------------------------------------------------


def _request_caller(ctx: Context | None) -> Caller:
    request = getattr(ctx.request_context, "request", None) if ctx is not None else None
    caller = request.scope.get("quarry.caller") if request is not None else None
    if not isinstance(caller, Caller):  # never reached through McpHttp, which sets it on every request
        raise ToolError("no caller on this request")
    return caller


class McpHttp:
    """``/mcp`` of the API: the bearer check, then the SDK's stateless streamable HTTP transport."""

    PATH = "/mcp"

    def __init__(self, state):
        from mcp.server.transport_security import TransportSecuritySettings

        self.state = state
        scrub = Scrubber(*state.paths())
        self.server = build(
            state.index,
            _request_caller,
            tuple(state.config.rerankers),
            scrub,
            answer_gate=lambda caller: state.answer_gate().check(caller),
        )
        host = state.config.host
        # a loopback server answers browsers too: refuse other Host headers (DNS rebinding)
        security = (
            TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
            if host in ("127.0.0.1", "localhost", "::1")
            else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        self.server.streamable_http_app(
            json_response=True,
            stateless_http=True,
            transport_security=security,
            max_request_body_size=state.config.max_body,
        )
        self.manager = self.server.session_manager

    def running(self):
        """The transport's task group, for the application's lifespan."""
        return self.manager.run()

    async def handle(self, scope, receive, send) -> None:
        headers = dict(scope.get("headers") or ())
        if scope.get("method") != "POST":
            # stateless JSON: no stream to open with GET, no session to end with DELETE (the
            # streamable HTTP transport's answer for a server without them is 405)
            return await _rpc_error(
                405, "the MCP endpoint takes POST only (stateless, JSON answers)", {"Allow": "POST"}
            )(scope, receive, send)
        try:
            caller = self.state.auth.caller(headers.get(b"authorization", b"").decode("latin-1"))
        except ApiError as exc:
            return await _rpc_error(exc.status, exc.message, exc.headers)(scope, receive, send)
        scope = {**scope, "quarry.caller": caller}
        await self.manager.handle_request(scope, receive, send)

    def mount(self, inner):
        """``inner`` with ``/mcp`` (and ``/mcp/``) answered by this server."""

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope.get("path", "").rstrip("/") == self.PATH:
                return await self.handle(scope, receive, send)
            return await inner(scope, receive, send)

        return app


RPC_SERVER_ERROR = -32000  # JSON-RPC's range for a server's own errors


def _rpc_error(status: int, message: str, headers: dict | None = None):
    """An HTTP error of ``/mcp`` as a JSON-RPC error (id null: the request is refused before it is
    read), which MCP clients show, with the HTTP status kept (401, 405, 429)."""
    from starlette.responses import Response

    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": RPC_SERVER_ERROR, "message": message, "data": {"status": status}},
    }
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)
