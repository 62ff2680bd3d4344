"""Who is calling: bearer keys, per-key rate limits, and the caller's principals.

Once a store has a key (:attr:`KeyRing.required`), every ``/v1`` request and ``/mcp`` needs
``Authorization: Bearer <token>`` of an active key (401 otherwise). A key's principals become the
``principals=`` of every library call it makes, so permissions are enforced by the library's own
filters; an admin key reads everything and may list runs. A store that never had a key is served
without them, every caller anonymous: ``public`` documents only, no runs (``quarry api`` refuses a
host other than loopback then, unless ``--insecure-no-auth``); a request that sends a key anyway
is refused (401), so a client pointed at the wrong store learns it.

Rate limits are token buckets per key: ``rate`` requests a minute, in bursts of up to ``rate``.
With ``--workers N`` each worker process keeps its own buckets with ``rate / N`` (requests are
spread over the workers by the kernel, so the sum is the key's rate), rounded up to 1.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

from quarry.api.errors import ApiError
from quarry.api.keys import KeyRing
from quarry.core.environment import environment

DEFAULT_RATE_LIMIT = 600  # requests per minute per key
log = logging.getLogger("quarry.api")


@dataclass(frozen=True)
class Caller:
    """Who a request is: ``principals`` None reads everything (an admin key, the store's owner)."""

    name: str
    principals: tuple[str, ...] | None
    admin: bool = False
    key_id: str | None = None

    @classmethod
    def owner(cls, principals=None) -> Caller:
        """A local process of the store's owner (``quarry mcp`` over stdio): everything, or as ``principals``."""
        if principals:
            from quarry.core.principals import caller

            return cls("local", caller(principals), admin=False)
        return cls("local", None, admin=True)


ANONYMOUS = Caller("anonymous", ("public",), admin=False)


class KeyRateLimiter:
    """Token buckets per API key id: what a key may ask of this server (the client side's limiter of
    requests to a model API is quarry.core.openai.ratelimit.RateLimiter)."""

    def __init__(self, share: int = 1):
        self.share = max(1, share)
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, last refill)
        self._guard = threading.Lock()

    def wait(self, key_id: str, per_minute: int, now: float | None = None) -> float:
        """0 when a request may go now (and takes a token), else the seconds until one may."""
        if per_minute <= 0:
            return 0.0
        rate = max(1.0, per_minute / self.share)  # this process's share, per minute
        now = time.monotonic() if now is None else now
        with self._guard:
            tokens, last = self._buckets.get(key_id, (rate, now))
            tokens = min(rate, tokens + (now - last) * rate / 60.0)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key_id] = (tokens, now)
            return (1.0 - tokens) * 60.0 / rate


class Authenticator:
    """Checks bearer tokens against the store's keys (re-read when they change) and rate-limits them."""

    def __init__(
        self, ring: KeyRing, rate_limit: int = DEFAULT_RATE_LIMIT, workers: int = 1, check_seconds: float | None = None
    ):
        self.ring = ring
        self.rate_limit = rate_limit
        self.limiter = KeyRateLimiter(workers)
        if check_seconds is None:  # a stat is free; on object storage each check is a GET
            from quarry.api.keys import ObjectKeys

            default = 5.0 if isinstance(ring.where, ObjectKeys) else 0.0
            configured = environment().keys_check_seconds
            check_seconds = default if configured is None else configured
        self.check_seconds = check_seconds
        self._checked = float("-inf")
        self._guard = threading.Lock()
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self.check_seconds:
            return
        with self._guard:
            if force or now - self._checked >= self.check_seconds:
                try:
                    self.ring.refresh()
                except Exception as exc:
                    if force:
                        raise
                    log.warning("cannot re-read the API keys (%s); checking against the last read", exc)
                self._checked = now

    @property
    def required(self) -> bool:
        return self.ring.required

    def caller(self, authorization: str | None) -> Caller:
        """The caller of a request with this ``Authorization`` header; :class:`ApiError` 401 or 429."""
        self.refresh()
        if not self.ring.required:
            if (authorization or "").strip():  # no key can be valid here: say so, never read as anonymous
                raise ApiError(
                    401,
                    "this server has no API keys, so this key is not one of its keys: send no "
                    "Authorization header (public documents only), or check the server's --db",
                    headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
                )
            return ANONYMOUS
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401,
                "this server needs an API key: send Authorization: Bearer <token> (`quarry keys create` makes one)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        key = self.ring.verify(token.strip())
        if key is None:
            raise ApiError(
                401,
                "the API key is not valid (unknown, revoked or expired)",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        limit = self.rate_limit if key.rate_limit is None else key.rate_limit
        wait = self.limiter.wait(key.id, limit)
        if wait > 0:
            raise ApiError(
                429,
                f"the key {key.name} made more than {limit} requests a minute: retry in {math.ceil(wait)} s",
                headers={"Retry-After": str(math.ceil(wait))},
            )
        principals = None if key.admin else tuple(sorted({*key.principals, "public"}))
        return Caller(key.name, principals, admin=key.admin, key_id=key.id)
