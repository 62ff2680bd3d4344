"""Messages about a failed API call that can go into a log or a run report: built from the status
and a short, redacted body only, never from the exception's repr, so an API key can never leak."""

from __future__ import annotations

from quarry.core.openai.retry import BadResponse, status_of

__all__ = ["describe_error", "redact"]


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
        except Exception:  # noqa: BLE001 - a streamed or closed response has no text
            body = ""
    text = " ".join(str(body).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def redact(text: str, *secrets: str) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
