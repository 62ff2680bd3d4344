"""The client of an OpenAI-compatible API (OpenAI, Azure, vLLM, Ollama, llama.cpp): made with its
own retries off (quarry retries, :mod:`quarry.core.openai.retry`) and a total per-request deadline
(httpx's timeout bounds each read, not a whole answer)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx
    import openai

__all__ = ["make_client", "host_of", "PLACEHOLDER_KEY"]

PLACEHOLDER_KEY = "unused"  # local servers (vLLM, Ollama, llama.cpp) accept any key, the client needs one


def make_client(base_url: str, api_key: str, timeout: float = 60.0) -> openai.OpenAI:
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
    return openai.OpenAI(
        base_url=base_url or None,
        api_key=api_key or PLACEHOLDER_KEY,
        timeout=timeout,
        max_retries=0,
        # openai's annotation names only httpx2's client; it takes an httpx (legacy) one too
        http_client=http_client,  # type: ignore[arg-type]
    )


def _deadline_transport_class() -> Callable[[float], httpx.HTTPTransport]:
    import httpx

    class DeadlineStream(httpx.SyncByteStream):
        def __init__(self, stream: httpx.SyncByteStream, deadline: float, request: httpx.Request):
            self._stream, self._deadline, self._request = stream, deadline, request

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._stream:
                if time.monotonic() > self._deadline:
                    raise httpx.ReadTimeout(
                        "the answer took longer than the request's total timeout", request=self._request
                    )
                yield chunk

        def close(self) -> None:
            self._stream.close()

    class DeadlineTransport(httpx.HTTPTransport):
        def __init__(self, total: float):
            super().__init__()
            self.total = total

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            deadline = time.monotonic() + self.total
            response = super().handle_request(request)
            assert isinstance(response.stream, httpx.SyncByteStream)  # a sync transport's answer
            response.stream = DeadlineStream(response.stream, deadline, request)
            return response

    return DeadlineTransport


def _DeadlineTransport(total: float) -> httpx.HTTPTransport:
    return _deadline_transport_class()(total)


def host_of(base_url: str) -> str:
    """The host[:port] of ``base_url`` for messages ("api.openai.com" when empty)."""
    if not base_url:
        return "api.openai.com"
    parts = urlsplit(base_url)
    return parts.netloc or base_url
