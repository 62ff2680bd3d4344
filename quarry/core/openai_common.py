"""Plumbing shared by every caller of an OpenAI-compatible API (embeddings, chat, LLM rerank).

Retries run in a tenacity loop (:func:`call_with_retries`): exponential backoff with full
jitter, the server's ``Retry-After``, never on an error a retry cannot fix (401, 403, 400, 404,
422). The ``openai`` client's own retries are switched off (``max_retries=0``). They do most of
this (408/409/429/5xx, timeouts, ``Retry-After`` up to 120 s, 0.5 s doubling to 8 s with up to
25 % jitter), but they cannot retry a 200 whose body is unusable (:class:`BadResponse`, what a
proxy cutting an answer short gives); they report nothing per retry, where the run report counts
retries and the LLM runtime's circuit breaker and response-format step-down act on each
attempt's error; their backoff constants are fixed, where embeddings wait up to 30 s between 6
attempts and chat up to 20 s between 4; and tests cannot give them a clock. Kept by hand,
therefore: the error classification (:func:`is_retryable`), the ``Retry-After`` /
``retry-after-ms`` reading, the backoff formula (:class:`RetryPolicy`), and the total
per-request deadline transport (httpx's timeout bounds each read, not a whole answer).

Messages surfaced to users are built from the status and a short, redacted body only, never
from the exception's repr, so an API key can never leak into a log or a run report.

Example::

    client = make_client(settings.openai_base_url, settings.openai_api_key)
    usage = Usage()
    response = call_with_retries(lambda: client.embeddings.create(model=m, input=texts),
                                 on_retry=lambda exc, attempt, delay: usage.add_retry())
    usage.add(response.usage)
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

PLACEHOLDER_KEY = "unused"  # local servers (vLLM, Ollama, llama.cpp) accept any key, the client needs one
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


class BadResponse(Exception):
    """A 200 answer that cannot be used (not JSON, missing fields): retried like a 5xx.

    Raise it from inside the function given to :func:`call_with_retries` when the response of an
    otherwise successful call does not parse; proxies that cut a body short cause these.
    """


def make_client(base_url: str, api_key: str, timeout: float = 60.0):
    """An ``openai.OpenAI`` client with the client's own retries off (we retry ourselves).

    ``base_url`` "" means the client's default (or ``OPENAI_BASE_URL``); ``api_key`` "" becomes
    a placeholder so that keyless local servers work.
    """
    import httpx
    import openai  # lazily: the package is only needed when a hosted backend is chosen

    # httpx's timeout bounds each read, not the whole answer: a server that drips a byte every
    # few seconds would hold a request (and an unattended run) forever. The transport below
    # gives every request a deadline of ``timeout`` seconds in all.
    http_client = httpx.Client(transport=_DeadlineTransport(timeout), timeout=timeout, follow_redirects=True)
    return openai.OpenAI(base_url=base_url or None, api_key=api_key or PLACEHOLDER_KEY,
                         timeout=timeout, max_retries=0, http_client=http_client)


def _deadline_transport_class():
    import httpx

    class DeadlineStream(httpx.SyncByteStream):
        def __init__(self, stream, deadline: float, request):
            self._stream, self._deadline, self._request = stream, deadline, request

        def __iter__(self):
            for chunk in self._stream:
                if time.monotonic() > self._deadline:
                    raise httpx.ReadTimeout("the answer took longer than the request's total timeout",
                                            request=self._request)
                yield chunk

        def close(self):
            self._stream.close()

    class DeadlineTransport(httpx.HTTPTransport):
        def __init__(self, total: float):
            super().__init__()
            self.total = total

        def handle_request(self, request):
            deadline = time.monotonic() + self.total
            response = super().handle_request(request)
            response.stream = DeadlineStream(response.stream, deadline, request)
            return response

    return DeadlineTransport


def _DeadlineTransport(total: float):  # noqa: N802 - a class made on first use (httpx is imported lazily)
    return _deadline_transport_class()(total)


def host_of(base_url: str) -> str:
    """The host[:port] of ``base_url`` for messages ("api.openai.com" when empty)."""
    if not base_url:
        return "api.openai.com"
    parts = urlsplit(base_url)
    return parts.netloc or base_url


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry: ``attempts`` calls in all, full-jitter backoff.

    The n-th wait (n from 0) is drawn from ``[ceiling·(1 - jitter), ceiling]`` with
    ``ceiling = min(cap, base·2ⁿ)``; ``jitter=1`` is "full jitter", ``jitter=0`` is none.
    A server's ``Retry-After`` is honoured when longer, up to ``max_retry_after`` seconds.
    """

    attempts: int = 6
    base: float = 0.5
    cap: float = 30.0
    jitter: float = 1.0
    max_retry_after: float = 120.0

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
        ceiling = min(self.cap, self.base * (2.0 ** attempt))
        draw = (rng or random).random()
        return ceiling * (1.0 - self.jitter * draw)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an API error, or None (timeouts, connection errors, others)."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_retryable(exc: BaseException) -> bool:
    """True for errors a later identical request may not hit: 429, 408, 5xx, timeouts, resets.

    Authentication, permission and validation errors (401, 403, 400, 404, 422) are final.
    """
    try:
        import openai
    except ImportError:  # pragma: no cover - only reachable without the optional package
        openai = None
    if openai is not None:
        if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
            return True
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            return status in _RETRYABLE_STATUS or status >= 500
        if isinstance(exc, openai.OpenAIError):
            return False
    if isinstance(exc, (TimeoutError, ConnectionError, BadResponse)):
        return True
    status = status_of(exc)
    return status is not None and (status in _RETRYABLE_STATUS or status >= 500)


def _headers(exc: BaseException):
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None)


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, ``Retry-After`` seconds or date).

    None when the error carries no such header or it cannot be read.
    """
    headers = _headers(exc)
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy = RetryPolicy(), *,
                      sleep: Callable[[float], Any] = time.sleep,
                      on_retry: Callable[[BaseException, int, float], Any] | None = None,
                      rng: random.Random | None = None) -> T:
    """Call ``fn()``; on a retryable error wait and call again, ``policy.attempts`` times in all.

    A tenacity ``Retrying`` loop: stop after ``policy.attempts``, retry what :func:`is_retryable`
    accepts, wait the larger of the jittered backoff and the server's ``Retry-After`` (the latter
    capped at ``policy.max_retry_after``). ``on_retry(exc, attempt, delay)`` is called before each
    wait (``attempt`` is the number of the failed call, from 1). A non-retryable error is raised at
    once; after the last attempt the last error is raised.
    """
    import tenacity

    def wait(state: tenacity.RetryCallState) -> float:
        delay = policy.backoff(state.attempt_number - 1, rng)
        asked = retry_after(state.outcome.exception())
        return delay if asked is None else max(delay, min(asked, policy.max_retry_after))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None:
            on_retry(state.outcome.exception(), state.attempt_number, state.upcoming_sleep)

    retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(max(1, policy.attempts)), wait=wait,
                                 retry=tenacity.retry_if_exception(is_retryable), sleep=sleep,
                                 before_sleep=before_sleep, reraise=True)
    return retrying(fn)


def describe_error(exc: BaseException, *secrets: str, limit: int = 200) -> str:
    """A short, key-free description of an API error: status and the start of the body.

    Built from the status code and the response body only, never from ``repr(exc)``, whose
    text may include request details.
    """
    status = status_of(exc)
    name = type(exc).__name__
    if status is None:
        if "Timeout" in name or isinstance(exc, TimeoutError):
            return redact("request timed out", *secrets)
        if "Connection" in name or isinstance(exc, ConnectionError):
            return redact("could not connect", *secrets)
        if isinstance(exc, BadResponse):
            return redact(f"unusable response: {str(exc)[:limit]}", *secrets)
        return redact(f"{name}: {str(exc)[:limit]}", *secrets)
    body = _short_body(exc, limit)
    return redact(f"HTTP {status}" + (f": {body}" if body else ""), *secrets)


def _short_body(exc: BaseException, limit: int) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        # OpenAI-style {"error": {"message": ...}} or {"message": ...}
        inner = body.get("error", body)
        if isinstance(inner, dict) and "message" in inner:
            body = inner["message"]
        elif isinstance(inner, str):
            body = inner
    if body is None:
        response = getattr(exc, "response", None)
        try:
            body = response.text if response is not None else ""
        except Exception:  # a streamed or closed response has no text
            body = ""
    text = " ".join(str(body).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RateLimiter:
    """At most ``per_minute`` units per minute, evenly spaced; blocks the caller.

    A unit is a request by default; ``acquire(cost)`` spends ``cost`` units, so the same class
    paces tokens per minute (``acquire(n_tokens)``). Thread-safe and first-come first-served:
    each caller reserves the next free slot under the lock and sleeps outside it. ``None`` or 0
    means unlimited.
    """

    def __init__(self, per_minute: float | None, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = time.sleep):
        self.interval = 60.0 / per_minute if per_minute else 0.0
        self._clock = clock
        self._sleep = sleep
        self._next = 0.0
        self._lock = threading.Lock()

    def acquire(self, cost: float = 1.0) -> float:
        """Wait for the next slot and spend ``cost`` units; returns the seconds waited."""
        if not self.interval:
            return 0.0
        with self._lock:
            now = self._clock()
            slot = max(now, self._next)
            self._next = slot + self.interval * cost
        wait = slot - now
        if wait > 0:
            self._sleep(wait)
        return wait


class Usage:
    """Thread-safe counters of API use, for the run report."""

    def __init__(self):
        self._lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.retries = 0

    def add(self, response_usage: Any = None, calls: int = 1) -> None:
        """Count one successful call and the tokens its response reports (dict or object)."""

        def get(name: str) -> int:
            value = (response_usage.get(name) if isinstance(response_usage, dict)
                     else getattr(response_usage, name, None))
            return int(value or 0)

        with self._lock:
            self.calls += calls
            if response_usage is not None:
                self.prompt_tokens += get("prompt_tokens")
                self.completion_tokens += get("completion_tokens")

    def add_retry(self, n: int = 1) -> None:
        """Count ``n`` retried calls."""
        with self._lock:
            self.retries += n

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        with self._lock:
            return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens, "retries": self.retries}

    def __repr__(self) -> str:
        return f"Usage({self.as_dict()})"


def redact(text: str, *secrets: str) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
