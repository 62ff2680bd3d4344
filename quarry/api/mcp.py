"""The MCP server (official ``mcp`` SDK): ``quarry mcp`` over stdio, and ``/mcp`` of ``quarry api``
(streamable HTTP, stateless, JSON answers; the same bearer keys and rate limits as ``/v1``).

Tools: ``search``, ``get_document``, ``get_context``, ``status``, and ``answer`` (an answer with
checked citations; through ``/mcp``, under the key's answer permission and answer rate limit). Each calls the library as the
caller (an HTTP request's key; over stdio, the owner of the store or ``--as``), so the same
permissions hold, and answers with the JSON of ``/v1`` (:mod:`quarry.search.serialize`).
Stateless HTTP keeps no session between requests, so any worker process can answer any request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import ValidationError

from quarry.api.auth import Caller
from quarry.api.errors import ApiError, Scrubber, respond
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


def build(index_of: Callable[[], Any], caller_of: Callable[[Context | None], Caller],
          rerankers: tuple[str, ...] = (), scrub: Scrubber | None = None,
          answer_gate: Callable[[Caller], None] | None = None) -> MCPServer:
    """An MCP server over the index ``index_of()``, each tool call made as ``caller_of(ctx)``;
    ``answer_gate(caller)`` raises :class:`ApiError` when that caller may not have an answer now."""
    from quarry import __version__

    scrub = scrub or Scrubber()
    server = MCPServer("quarry", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    def call(fn):
        try:
            return fn()
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ToolError(f"{where}: {first.get('msg', 'invalid')}".strip(": ")) from None
        except QuarryError as exc:
            raise ToolError(scrub(str(exc))) from None

    @server.tool(annotations=READ_ONLY)
    def search(query: str, k: int = 10, mode: Literal["hybrid", "vector", "bm25"] = "hybrid",
               where: list[str] | None = None, path: list[str] | None = None, type: list[str] | None = None,
               since: str | None = None, until: str | None = None,
               segments: Literal["balanced", "precision", "find_all"] | None = None,
               window: int | None = None, explain: bool = False, ctx: Context | None = None) -> dict[str, Any]:
        """Search the documents for passages relevant to `query` (keywords or a question); best first.

        Returns `results`: each with score, chunk_id, doc_id, path, title, section, page_start/page_end and
        the passage text. Options: `k` results (1-1000); `mode` hybrid (default), vector (meaning) or bm25
        (exact words, codes, numbers); filters `where` (e.g. "file_type = 'pdf'", "mtime >= 2024-01-01",
        "metadata.author = 'Kim'"), `path` globs (e.g. "reports/**"), `type` (e.g. "pdf"), `since`/`until`
        (YYYY-MM-DD); `window` N adds N chunks of context on each side of every hit (in `windows`);
        `segments` returns whole relevant passages spanning several chunks instead (in `segments`).
        """
        from quarry.api.schemas import SearchRequest

        def run():
            request = SearchRequest(query=query, k=k, mode=mode, where=where, path=path, type=type, since=since,
                                    until=until, segments=segments, window=window, explain=explain)
            return request.run(index_of(), caller_of(ctx).principals, rerankers)

        return call(run)

    @server.tool(annotations=READ_ONLY)
    def get_document(doc_id: str, ctx: Context | None = None) -> dict[str, Any]:
        """A document by its doc_id (from a search result): path, title, type, size, dates, metadata, its
        sections (title, level, pages) and its chunks (chunk_id, section, pages; no text: use get_context)."""
        return call(lambda: index_of().document(doc_id, principals=caller_of(ctx).principals))

    @server.tool(annotations=READ_ONLY)
    def get_context(chunk_id: str, before: int = 2, after: int = 2, query: str | None = None,
                    ctx: Context | None = None) -> dict[str, Any]:
        """The text around a chunk (a chunk_id from a search result): the chunk and `before`/`after` chunks
        of its document (0-50 each), merged into one passage in `window`. With `query`, instead the
        relevant segments of that chunk's document for the query (whole passages, best first)."""

        def run():
            index = index_of()
            principals = caller_of(ctx).principals
            if not (0 <= before <= 50 and 0 <= after <= 50):
                raise ToolError("before and after take 0 to 50 chunks")
            with index.pinned():
                chunk = index.chunk(chunk_id, neighbours=(before, after), principals=principals)
                if not query:
                    return chunk
                from quarry.api.schemas import SearchRequest

                request = SearchRequest(query=query, k=10, doc=[chunk["doc_id"]], segments="balanced")
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
    def answer(question: str, k: int = 8, path: list[str] | None = None, type: list[str] | None = None,
               ctx: Context | None = None) -> dict[str, Any]:
        """Answer `question` from the documents you may read, with citations checked against the passages.

        Returns `status` (answered, not_found: nothing readable answers it and no model was asked, refused,
        error), `text` with [n] markers, `citations` (number, doc_id, path, title, pages, chunk_id, the quoted
        passage), `evidence` (the numbered passages the model was given), `dropped` citations and `uncited`
        sentences. Filters: `path` globs, `type` (e.g. pdf). Costs a model call unless not_found.
        """
        from quarry.api.answering import AnswerRequest, log_answer

        def run():
            caller = caller_of(ctx)
            if answer_gate is not None:
                try:
                    answer_gate(caller)
                except ApiError as exc:
                    raise ToolError(exc.message) from None
            request = AnswerRequest(question=question, k=k, path=path, type=type)
            data = request.run(index_of(), caller.principals)
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
        self.server = build(state.index, _request_caller, tuple(state.config.rerankers), scrub,
                            answer_gate=lambda caller: state.answer_gate().check(caller))
        host = state.config.host
        # a loopback server answers browsers too: refuse other Host headers (DNS rebinding)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        ) if host in ("127.0.0.1", "localhost", "::1") else TransportSecuritySettings(
            enable_dns_rebinding_protection=False)
        self.server.streamable_http_app(json_response=True, stateless_http=True, transport_security=security,
                                        max_request_body_size=state.config.max_body)
        self.manager = self.server.session_manager

    def running(self):
        """The transport's task group, for the application's lifespan."""
        return self.manager.run()

    async def handle(self, scope, receive, send) -> None:
        headers = dict(scope.get("headers") or ())
        try:
            caller = self.state.auth.caller(headers.get(b"authorization", b"").decode("latin-1"))
        except ApiError as exc:
            return await respond(exc.status, exc.message, exc.code, exc.headers)(scope, receive, send)
        scope = {**scope, "quarry.caller": caller}
        await self.manager.handle_request(scope, receive, send)

    def mount(self, inner):
        """``inner`` with ``/mcp`` (and ``/mcp/``) answered by this server."""

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope.get("path", "").rstrip("/") == self.PATH:
                return await self.handle(scope, receive, send)
            return await inner(scope, receive, send)

        return app
