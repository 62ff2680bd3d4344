"""A minimal OpenAI-compatible HTTP server for tests: real HTTP, real ``openai`` client, no network.

Usage::

    with FakeOpenAI(dim=64) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
        server.fail_next(2, status=429, retry_after=0.01)
        ...
        assert server.calls == 3

Endpoints: ``POST /v1/embeddings`` (deterministic unit vectors from a hash of each text),
``POST /v1/chat/completions`` (content from ``server.chat_handler(request_json)``), and
``GET /v1/models``. Everything the server does can be scripted through attributes:

- ``fail_next(n, status, retry_after, retry_after_ms, body, path)``: the next ``n`` requests fail;
- ``delay`` (every request) and ``delay_next(n, seconds)``: slow answers, for client timeouts;
- ``malformed_next(n)``: a 200 whose body is not JSON;
- ``wrong_dim``: embeddings of this size whatever was asked;
- ``max_inputs`` / ``max_input_tokens`` / ``max_request_tokens``: limits answered with a 400;
- ``api_key``: when set, any other bearer token gets a 401;
- ``renormalise``: whether vectors cut to ``dimensions`` are re-normalised (OpenAI does);
- ``shuffle``: embeddings come back out of order (clients must sort by ``index``);
- ``drop_next(n)``: the next ``n`` requests get the connection closed with no answer;
- ``drip_next(n, seconds)``: the next ``n`` answers trickle out a byte at a time, ``seconds`` apart;
- ``wrong_count``: embeddings answers hold this many vectors more (or, negative, fewer) than inputs;
- ``echo_key``: a rejected key is quoted back in the 401 body, as some providers do (leak tests);
- ``max_context``: chat requests whose messages hold more tokens get OpenAI's context-length 400.

A chat request with ``"stream": true`` is answered as Server-Sent Events: the content in a few
deltas, then a chunk with ``usage``, then ``data: [DONE]``.

It records every request (``requests``: ``Request(method, path, headers, json)``), the number of
API calls (``calls``) and the most requests it served at once (``max_in_flight``); ``prompts`` is
the text of every chat message it received (the leak suite greps it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

EMBED_MODEL = "fake-embed"
CHAT_MODEL = "fake-chat"


def fake_tokens(text: str) -> int:
    """The server's token count: one token per four characters, rounded up (at least one)."""
    return max(1, math.ceil(len(text) / 4))


def fake_vector(text: str, dim: int) -> np.ndarray:
    """The deterministic unit vector the server returns for ``text``."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vec / np.linalg.norm(vec)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    json: object = None


@dataclass
class _Failure:
    status: int
    retry_after: float | str | None = None
    retry_after_ms: float | None = None
    body: object = None
    path: str | None = None


@dataclass
class _Script:
    failures: list[_Failure] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    malformed: int = 0
    drops: int = 0
    drips: list[float] = field(default_factory=list)


class FakeOpenAI:
    """An OpenAI-compatible server on 127.0.0.1, in a daemon thread; a context manager."""

    def __init__(
        self,
        dim: int = 64,
        *,
        delay: float = 0.0,
        max_inputs: int | None = None,
        max_input_tokens: int | None = None,
        max_request_tokens: int | None = None,
        api_key: str | None = None,
        token_counter: Callable[[str], int] = fake_tokens,
    ):
        self.dim = dim
        self.delay = delay
        self.max_inputs = max_inputs
        self.max_input_tokens = max_input_tokens
        self.max_request_tokens = max_request_tokens
        self.api_key = api_key
        self.token_counter = token_counter
        self.wrong_dim: int | None = None
        self.renormalise = True
        self.shuffle = False
        self.wrong_count = 0
        self.echo_key = False
        self.max_context: int | None = None
        self.chat_handler: Callable[[dict], str | dict | list] = lambda request: "fake reply"
        # response_format styles the chat endpoint accepts ("json_schema", "json_object_schema",
        # "json_object"); None accepts all. Others get HTTP 422 naming response_format, as
        # llama-cpp-python's server answers OpenAI's json_schema.
        self.response_formats: set[str] | None = None
        self.format_refusal_status = 422  # llama-cpp-python's server itself answers 500 with the same error
        self.requests: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._script = _Script()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fakeopenai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes requests sleeping in a delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    # -- scripting ---------------------------------------------------------------------------

    def fail_next(
        self,
        n: int = 1,
        status: int = 429,
        retry_after: float | str | None = None,
        *,
        retry_after_ms: float | None = None,
        body: object = None,
        path: str | None = None,
    ) -> None:
        """The next ``n`` requests (to ``path`` only, when given) answer ``status``."""
        with self._lock:
            self._script.failures.extend(_Failure(status, retry_after, retry_after_ms, body, path) for _ in range(n))

    def delay_next(self, n: int, seconds: float) -> None:
        """The next ``n`` requests wait ``seconds`` before answering."""
        with self._lock:
            self._script.delays.extend([seconds] * n)

    def malformed_next(self, n: int = 1) -> None:
        """The next ``n`` requests get a 200 whose body is not JSON."""
        with self._lock:
            self._script.malformed += n

    def drop_next(self, n: int = 1) -> None:
        """The next ``n`` requests: the connection is closed without an answer."""
        with self._lock:
            self._script.drops += n

    def drip_next(self, n: int, seconds: float) -> None:
        """The next ``n`` answers are sent a byte at a time, ``seconds`` apart (a slow drip)."""
        with self._lock:
            self._script.drips.extend([seconds] * n)

    def reset(self) -> None:
        """Forget recorded requests and pending scripts."""
        with self._lock:
            self.requests.clear()
            self._script = _Script()
            self.max_in_flight = 0

    # -- introspection -----------------------------------------------------------------------

    @property
    def calls(self) -> int:
        """API calls received (every POST, failed ones included)."""
        with self._lock:
            return sum(1 for r in self.requests if r.method == "POST")

    def calls_to(self, path: str) -> list[Request]:
        """Recorded requests to ``path`` (e.g. "/v1/embeddings")."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    @property
    def prompts(self) -> list[str]:
        """The messages of every chat request, each request's joined into one string, in arrival order."""
        out = []
        for r in self.calls_to("/v1/chat/completions"):
            messages = r.json.get("messages") if isinstance(r.json, dict) else None
            out.append("\n".join(str(m.get("content", "")) for m in messages or [] if isinstance(m, dict)))
        return out

    @property
    def embedding_inputs(self) -> list[list[str]]:
        """The ``input`` lists of every embeddings request, in arrival order."""
        out = []
        for r in self.calls_to("/v1/embeddings"):
            inp = r.json.get("input") if isinstance(r.json, dict) else None
            out.append([inp] if isinstance(inp, str) else list(inp or []))
        return out

    # -- request handling (called from the handler threads) -----------------------------------

    def _take(self, path: str) -> tuple[_Failure | None, float, bool]:
        with self._lock:
            failure = None
            for i, f in enumerate(self._script.failures):
                if f.path is None or f.path == path:
                    failure = self._script.failures.pop(i)
                    break
            delay = self._script.delays.pop(0) if self._script.delays else self.delay
            malformed = False
            if failure is None and self._script.malformed:
                self._script.malformed -= 1
                malformed = True
            return failure, delay, malformed

    def _enter(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _embeddings(self, body: dict) -> tuple[int, object]:
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
            return 400, _error("'input' must be a non-empty string or list of strings", "input")
        if self.max_inputs is not None and len(inputs) > self.max_inputs:
            return 400, _error(f"too many inputs: {len(inputs)} > {self.max_inputs} per request", "input")
        counts = [self.token_counter(t) for t in inputs]
        if self.max_input_tokens is not None and max(counts) > self.max_input_tokens:
            return 400, _error(
                f"This model's maximum context length is {self.max_input_tokens} tokens, "
                f"however you requested {max(counts)} tokens",
                "input",
            )
        if self.max_request_tokens is not None and sum(counts) > self.max_request_tokens:
            return 400, _error(
                f"Requested {sum(counts)} tokens, max {self.max_request_tokens} tokens per request", "input"
            )
        dim = self.dim
        asked = body.get("dimensions")
        if asked is not None:
            if not isinstance(asked, int) or not 1 <= asked <= self.dim:
                return 400, _error(f"dimensions must be between 1 and {self.dim}", "dimensions")
            dim = asked
        if self.wrong_dim is not None:
            dim = self.wrong_dim
        encoding = body.get("encoding_format", "float")
        data = []
        for i, text in enumerate(inputs):
            vec = fake_vector(text, max(dim, self.dim))[:dim]
            if self.renormalise:
                vec = vec / np.linalg.norm(vec)
            emb = (
                base64.b64encode(vec.astype("<f4").tobytes()).decode()
                if encoding == "base64"
                else [float(x) for x in vec]
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        if self.wrong_count > 0:
            data += data[: self.wrong_count]
        elif self.wrong_count < 0:
            data = data[: self.wrong_count]
        if self.shuffle:
            random.shuffle(data)
        total = sum(counts)
        return 200, {
            "object": "list",
            "data": data,
            "model": body.get("model", EMBED_MODEL),
            "usage": {"prompt_tokens": total, "total_tokens": total},
        }

    def _chat(self, body: dict) -> tuple[int, object]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, _error("'messages' must be a non-empty list", "messages")
        fmt = body.get("response_format")
        if fmt is not None and self.response_formats is not None:
            if format_style(fmt) not in self.response_formats:
                if self.format_refusal_status >= 500:
                    return self.format_refusal_status, _error(
                        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                        "'msg': \"Input should be 'text' or 'json_object'\"}",
                        kind="internal_server_error",
                    )
                return 422, {
                    "detail": [
                        {
                            "type": "literal_error",
                            "loc": ["body", "response_format", "type"],
                            "msg": "Input should be 'text' or 'json_object'",
                            "input": fmt.get("type"),
                        }
                    ]
                }
        prompt = sum(self.token_counter(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
        if self.max_context is not None and prompt > self.max_context:
            return 400, _error(
                f"This model's maximum context length is {self.max_context} tokens. However, your "
                f"messages resulted in {prompt} tokens.",
                "messages",
            )
        content = self.chat_handler(body)
        if not isinstance(content, str):
            content = json.dumps(content)
        completion = self.token_counter(content)
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", CHAT_MODEL),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }


def format_style(fmt: dict | None) -> str:
    """The style of a ``response_format`` as quarry names them: json_schema, json_object_schema, json_object, none."""
    if fmt is None:
        return "none"
    kind = fmt.get("type", "")
    return kind + ("_schema" if kind == "json_object" and "schema" in fmt else "")


def _error(message: str, param: str | None = None, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


_STATUS_TYPES = {
    401: "invalid_api_key",
    403: "permission_denied",
    404: "not_found",
    408: "timeout",
    429: "rate_limit_exceeded",
}


def _handler_for(server: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms delayed-ACK stall

        def log_message(self, *args):  # quiet: tests read server.requests instead
            pass

        drip = 0.0  # seconds between bytes of this answer (a slow drip), 0 for one write

        def _send(
            self, status: int, payload: object = None, raw: bytes | None = None, headers: dict[str, str] | None = None
        ) -> None:
            data = raw if raw is not None else json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.drip:
                    for i in range(len(data)):
                        if server._stopping.wait(self.drip):
                            break
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                self.close_connection = True

        def _stream(self, payload: dict) -> None:
            """A chat answer as Server-Sent Events: content deltas of a few words, then usage, then [DONE]."""
            content = payload["choices"][0]["message"]["content"]
            words = content.split(" ")
            pieces = [" ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "") for i in range(0, len(words), 3)]
            base = {
                "id": payload["id"],
                "object": "chat.completion.chunk",
                "created": payload["created"],
                "model": payload["model"],
            }
            events = [
                {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": p}, "finish_reason": None}]}
                for p in pieces
            ]
            events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            events.append({**base, "choices": [], "usage": payload["usage"]})
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for event in events:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        def do_GET(self):
            request = Request("GET", self.path, {k.lower(): v for k, v in self.headers.items()})
            server._enter(request)
            try:
                if self.path.rstrip("/") == "/v1/models":
                    models = [
                        {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                        for m in (EMBED_MODEL, CHAT_MODEL)
                    ]
                    self._send(200, {"object": "list", "data": models})
                else:
                    self._send(404, _error(f"no route {self.path}", kind="not_found"))
            finally:
                server._leave()

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = None
            request = Request("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            server._enter(request)
            try:
                self._post(request)
            finally:
                server._leave()

        def _post(self, request: Request) -> None:
            failure, delay, malformed = server._take(request.path)
            with server._lock:
                drop = server._script.drops > 0
                server._script.drops -= drop
                self.drip = server._script.drips.pop(0) if server._script.drips and not drop else 0.0
            if drop:
                self.close_connection = True  # a dropped connection: no status line at all
                return
            if delay and server._stopping.wait(delay):
                self.close_connection = True  # shutting down: drop the request unanswered
                return
            if server.api_key is not None and request.headers.get("authorization") != f"Bearer {server.api_key}":
                given = request.headers.get("authorization", "")
                message = (
                    f"Incorrect API key provided: {given.removeprefix('Bearer ')}"
                    if server.echo_key
                    else "Incorrect API key provided"
                )
                self._send(401, _error(message, kind="invalid_api_key"))
                return
            if failure is not None:
                headers = {}
                if failure.retry_after is not None:
                    headers["Retry-After"] = str(failure.retry_after)
                if failure.retry_after_ms is not None:
                    headers["retry-after-ms"] = str(failure.retry_after_ms)
                body = failure.body
                if body is None:
                    body = _error(
                        f"scripted failure {failure.status}", kind=_STATUS_TYPES.get(failure.status, "server_error")
                    )
                raw = body.encode() if isinstance(body, str) else None
                self._send(failure.status, body, raw=raw, headers=headers)
                return
            if malformed:
                self._send(200, raw=b'{"object": "list", "data": [')
                return
            if not isinstance(request.json, dict):
                self._send(400, _error("request body is not a JSON object"))
                return
            path = request.path.rstrip("/")
            if path == "/v1/embeddings":
                status, payload = server._embeddings(request.json)
            elif path == "/v1/chat/completions":
                status, payload = server._chat(request.json)
                if status == 200 and request.json.get("stream"):
                    self._stream(payload)
                    return
            else:
                status, payload = 404, _error(f"no route {request.path}", kind="not_found")
            self._send(status, payload)

    return Handler
