"""A rate limiter of requests per minute, and thread-safe counters of API use for the run report."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RateLimiter", "Usage"]


class RateLimiter:
    """At most ``per_minute`` units per minute, evenly spaced; blocks the caller.

    A unit is a request by default; ``acquire(cost)`` spends ``cost`` units, so the same class
    paces tokens per minute (``acquire(n_tokens)``). Thread-safe and first-come first-served:
    each caller reserves the next free slot under the lock and sleeps outside it. ``None`` or 0
    means unlimited.
    """

    def __init__(
        self,
        per_minute: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
    ):
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

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.retries = 0

    def add(self, response_usage: Any = None, calls: int = 1) -> None:
        """Count one successful call and the tokens its response reports (dict or object)."""

        def get(name: str) -> int:
            value = (
                response_usage.get(name) if isinstance(response_usage, dict) else getattr(response_usage, name, None)
            )
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
            return {
                "calls": self.calls,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "retries": self.retries,
            }

    def __repr__(self) -> str:
        return f"Usage({self.as_dict()})"
