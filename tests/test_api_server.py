"""The pieces of ``quarry api`` below the endpoints: the host check, TCP_NODELAY under --workers, the
body limit on a streamed body, the error messages' scrubbing."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import httpx
import pytest

from quarry.api.errors import Scrubber
from quarry.api.server import NoDelayH11Protocol, check_host, is_loopback
from quarry.core.errors import UsageError


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_a_reachable_host_needs_keys_or_the_explicit_flag():
    assert check_host("127.0.0.1", keys_required=True, insecure_no_auth=False) is None
    assert "anonymous" in check_host("127.0.0.1", keys_required=False, insecure_no_auth=False)
    assert check_host("0.0.0.0", keys_required=True, insecure_no_auth=False) is None
    with pytest.raises(UsageError, match="refusing to serve 0.0.0.0 without API keys"):
        check_host("0.0.0.0", keys_required=False, insecure_no_auth=False)
    assert "WITHOUT authentication" in check_host("0.0.0.0", keys_required=False, insecure_no_auth=True)


def test_every_connection_gets_tcp_nodelay_even_from_a_socket_rebuilt_with_proto_0():
    """uvicorn's workers get the listening socket rebuilt with proto 0, so asyncio sets no TCP_NODELAY."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    conn, _ = listener.accept()
    try:
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0

        class Transport:
            def get_extra_info(self, name, default=None):
                return conn if name == "socket" else default

        protocol = NoDelayH11Protocol.__new__(NoDelayH11Protocol)
        try:
            protocol.connection_made(Transport())
        except Exception:
            pass
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        for s in (client, conn, listener):
            s.close()


def test_a_streamed_body_over_the_limit_is_413(tmp_path):
    from quarry.api.app import ApiConfig, asgi_app

    app = asgi_app(ApiConfig(db=str(tmp_path / "no-store"), max_body=1024, mcp=False))

    async def run():
        async def body():
            for _ in range(64):
                yield b"x" * 1024

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            streamed = await client.post("/v1/search", content=body(), headers={"Content-Type": "application/json"})
            declared = await client.post("/v1/search", content=b"y" * 4096)
            ready = await client.get("/readyz")
        return streamed, declared, ready

    streamed, declared, ready = asyncio.run(run())
    assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "payload_too_large"
    assert declared.status_code == 413
    assert ready.status_code == 503 and str(tmp_path) not in ready.text  # no index there: unavailable, no path


def test_messages_lose_the_stores_paths_and_stay_one_short_line():
    scrub = Scrubber("/srv/quarry/store", "/srv")
    assert (
        scrub("catalog /srv/quarry/store/catalog-000001.duckdb is\ndamaged")
        == "catalog <store>/catalog-000001.duckdb is damaged"
    )
    assert len(scrub("x" * 5000)) == 500


def test_the_docs_list_every_search_field_and_error_code():
    """docs/api.md's tables of search fields and of error codes are the code's, in order."""
    from quarry.api.errors import _STATUS_CODES
    from quarry.api.schemas import SearchRequest

    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    start = text.index("`POST /v1/search` takes")
    fields = text[start : text.index("```bash", start)]
    names = [
        n for line in fields.splitlines() if line.startswith("| `") for n in re.findall(r"`(\w+)`", line.split("|")[1])
    ]
    assert names == list(SearchRequest.model_fields)
    errors = text[text.index("### Errors") : text.index("## Keys")]
    codes = re.findall(r"^\| (\d{3}) \| `(\w+)`", errors, re.M)
    assert {int(status): code for status, code in codes} == _STATUS_CODES
