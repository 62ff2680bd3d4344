"""Retries of calls to an OpenAI-compatible API (embeddings, chat, LLM rerank).

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
``retry-after-ms`` reading and the backoff formula (:class:`RetryPolicy`); and the total
per-request deadline transport (:mod:`quarry.core.openai.client`: httpx's timeout bounds each
read, not a whole answer).
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["BadResponse", "RetryPolicy", "status_of", "is_retryable", "retry_after", "call_with_retries"]

T = TypeVar("T")
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


class BadResponse(Exception):
    """A 200 answer that cannot be used (not JSON, missing fields): retried like a 5xx.

    Raise it from inside the function given to :func:`call_with_retries` when the response of an
    otherwise successful call does not parse; proxies that cut a body short cause these.
    """


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
        ceiling = min(self.cap, self.base * (2.0**attempt))
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
        openai = None  # type: ignore[assignment]  # the module, or None without the package
    if openai is not None:
        if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
            return True
        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            return code in _RETRYABLE_STATUS or code >= 500
        if isinstance(exc, openai.OpenAIError):
            return False
    if isinstance(exc, (TimeoutError, ConnectionError, BadResponse)):
        return True
    status = status_of(exc)
    return status is not None and (status in _RETRYABLE_STATUS or status >= 500)


def _headers(exc: BaseException) -> Any:
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


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy = RetryPolicy(),
    *,
    sleep: Callable[[float], Any] = time.sleep,
    on_retry: Callable[[BaseException, int, float], Any] | None = None,
    rng: random.Random | None = None,
) -> T:
    """Call ``fn()``; on a retryable error wait and call again, ``policy.attempts`` times in all.

    A tenacity ``Retrying`` loop: stop after ``policy.attempts``, retry what :func:`is_retryable`
    accepts, wait the larger of the jittered backoff and the server's ``Retry-After`` (the latter
    capped at ``policy.max_retry_after``). ``on_retry(exc, attempt, delay)`` is called before each
    wait (``attempt`` is the number of the failed call, from 1). A non-retryable error is raised at
    once; after the last attempt the last error is raised.
    """
    import tenacity

    def failure(state: tenacity.RetryCallState) -> BaseException:
        # wait and before_sleep run only after a retryable error (retry_if_exception)
        assert state.outcome is not None
        exc = state.outcome.exception()
        assert exc is not None
        return exc

    def wait(state: tenacity.RetryCallState) -> float:
        delay = policy.backoff(state.attempt_number - 1, rng)
        asked = retry_after(failure(state))
        return delay if asked is None else max(delay, min(asked, policy.max_retry_after))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None:
            on_retry(failure(state), state.attempt_number, state.upcoming_sleep)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(1, policy.attempts)),
        wait=wait,
        retry=tenacity.retry_if_exception(is_retryable),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(fn)
