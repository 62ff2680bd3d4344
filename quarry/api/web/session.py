"""Who is looking at a page: the API key kept in a cookie, checked on every page and fragment.

Signing in stores the key's token in an ``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` when
the page came over TLS: ``https`` as uvicorn sees it, which honours ``X-Forwarded-Proto`` from a
proxy it trusts), so script cannot read it and no other site's page can send it. Every request
hands the token to the same :class:`~quarry.api.auth.Authenticator` as ``Authorization: Bearer``
does, so a page reads exactly what that key may read, a revoked key is refused at its next
request and a page view counts against the key's rate limit. A store that never had a key is
served to anyone as ``public`` (as the API is).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from fastapi import Request

from quarry.api.auth import Caller
from quarry.api.deps import state_of
from quarry.api.errors import ApiError

COOKIE = "quarry_key"
MAX_AGE = 30 * 86400  # the cookie's life; the key's own expiry and revocation still apply at each request


class SignIn(Exception):
    """The page needs a key: no cookie, or its key is no longer valid (``expired``)."""

    def __init__(self, expired: bool = False):
        super().__init__("sign in")
        self.expired = expired


def caller(request: Request) -> Caller:
    """The caller of a page request, from its cookie; :class:`SignIn` when it needs a key."""
    auth = state_of(request).auth
    token = request.cookies.get(COOKIE, "").strip()
    if not token:
        if auth.required:
            raise SignIn()
        return auth.caller(None)
    try:
        return auth.caller(f"Bearer {token}")
    except ApiError as exc:
        if exc.status == 401:
            raise SignIn(expired=True) from None
        raise


def check(request: Request, token: str) -> Caller:
    """The caller a token signs in as; :class:`ApiError` 401 for a token that is not a valid key."""
    auth = state_of(request).auth
    return auth.caller(f"Bearer {token.strip()}" if token.strip() else None)


def secure(request: Request) -> bool:
    return request.url.scheme == "https"


def same_origin(request: Request) -> bool:
    """Whether a form post comes from this server's own page (its ``Origin``, when the browser sends
    one, names this host): a second line behind ``SameSite=Strict`` against cross-site posts."""
    origin = request.headers.get("origin")
    if origin is None:  # not every browser sends one on a same-origin post
        return True
    return origin != "null" and urlsplit(origin).netloc == request.headers.get("host", "")


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (never ``//host`` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def sign_in_url(request: Request) -> str:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return f"/login?next={quote(here, safe='/')}"
