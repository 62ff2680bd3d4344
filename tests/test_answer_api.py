"""``POST /v1/answer`` over a real ``quarry api`` (uvicorn) with an httpx client, streaming included;
the MCP ``answer`` tool through the MCP SDK's client; keys limited to search, and answers rate-limited
apart from requests; the token counts in the server's log, never the key or the passages."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from apiserver import api_server
from fakeopenai import FakeOpenAI
from test_answer import DOCS
from test_query import commit, doc

from quarry.api.keys import FileKeys, KeyRing

QUESTION = "When does the wombat programme ship its builds?"


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI() as server:
        server.chat_handler = lambda body: "The builds ship every Tuesday [1]. The picnic was in June [7]."
        yield server


@pytest.fixture(scope="module")
def served(tmp_path_factory, fake):
    work = tmp_path_factory.mktemp("answer-api")
    store = work / "store"
    commit(store, [doc(name, texts) for name, texts in DOCS.items()])
    ring = KeyRing(FileKeys(store / "keys.json"))
    # the helper's documents have no principals (the owner's alone): the keys read everything
    tokens = {
        "full": ring.create("full", admin=True, rate_limit=0)[1],
        "search-only": ring.create("search-only", admin=True, answers=False)[1],
        "two-answers": ring.create("two-answers", admin=True, rate_limit=0, answer_rate_limit=2)[1],
    }
    env = {
        "QUARRY_LLM_BASE_URL": fake.base_url,
        "QUARRY_LLM_MODEL": "fake-chat",
        "QUARRY_LLM_API_KEY": "sk-api-secret-123",
        "QUARRY_EMBED_DIM": "64",
    }
    log = work / "api.log"
    with api_server(store, "--log-level", "info", log=log, env=env) as (base, _):
        yield base, tokens, log


def auth(tokens, name):
    return {"Authorization": f"Bearer {tokens[name]}"}


def test_answer_as_json(served, fake):
    base, tokens, log = served
    fake.reset()
    with httpx.Client(base_url=base, timeout=60) as http:
        response = http.post("/v1/answer", json={"question": QUESTION, "style": "text"}, headers=auth(tokens, "full"))
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["status"] == "answered" and data["text"] == "The builds ship every Tuesday [1]. The picnic was in June."
    assert data["citations"][0]["path"].endswith(".md") and [d["number"] for d in data["dropped"]] == [7]
    assert data["uncited"] == ["The picnic was in June."] and data["usage"]["prompt_tokens"] > 0
    assert response.headers["X-Quarry-Generation"] == str(data["generation"])
    text = log.read_text()
    assert "answer for full: answered" in text and "tokens in" in text
    assert "sk-api-secret-123" not in text and "quartz pipeline" not in text  # no key, no passage at info


def test_answer_streams_server_sent_events_ending_with_checked_citations(served, fake):
    base, tokens, _ = served
    fake.reset()
    events = []
    with httpx.Client(base_url=base, timeout=60) as http:
        with http.stream(
            "POST", "/v1/answer", json={"question": QUESTION, "stream": True}, headers=auth(tokens, "full")
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            kind = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line.removeprefix("data: "))))
    kinds = [k for k, _ in events]
    assert kinds[0] == "evidence" and kinds[-1] == "answer" and kinds.count("token") >= 2
    assert "".join(v["text"] for k, v in events if k == "token").startswith("The builds ship every Tuesday [1].")
    final = events[-1][1]
    assert final["status"] == "answered" and final["citations"][0]["number"] == 1
    assert [d["number"] for d in final["dropped"]] == [7]
    assert fake.requests[-1].json["stream"] is True


def test_not_found_and_validation(served, fake):
    base, tokens, _ = served
    fake.reset()
    with httpx.Client(base_url=base, timeout=60) as http:
        response = http.post("/v1/answer", json={"question": "zyxxqv plorbnik frumious"}, headers=auth(tokens, "full"))
        assert response.status_code == 200 and response.json()["status"] == "not_found" and fake.calls == 0
        response = http.post("/v1/answer", json={"question": QUESTION, "model": "gpt-5"}, headers=auth(tokens, "full"))
        assert response.status_code == 422  # the server chooses the model: what answers cost is its call
        assert http.post("/v1/answer", json={"question": QUESTION}).status_code == 401


def test_a_key_limited_to_search_and_answers_rate_limited_apart(served, fake):
    base, tokens, _ = served
    with httpx.Client(base_url=base, timeout=60) as http:
        response = http.post("/v1/answer", json={"question": QUESTION}, headers=auth(tokens, "search-only"))
        assert response.status_code == 403 and "search" in response.json()["error"]["message"]
        assert http.post("/v1/search", json={"query": "wombat"}, headers=auth(tokens, "search-only")).status_code == 200
        codes = [
            http.post(
                "/v1/answer", json={"question": QUESTION, "style": "text"}, headers=auth(tokens, "two-answers")
            ).status_code
            for _ in range(3)
        ]
        assert codes == [200, 200, 429]
        assert http.post("/v1/search", json={"query": "wombat"}, headers=auth(tokens, "two-answers")).status_code == 200


def test_mcp_client_calls_answer(served, fake):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    base, tokens, _ = served
    fake.reset()

    async def run(name):
        async with httpx2.AsyncClient(headers=auth(tokens, name), timeout=60) as http:
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                result = await client.call_tool("answer", {"question": QUESTION})
                return names, result

    names, result = asyncio.run(run("full"))
    assert "answer" in names and not result.is_error
    data = json.loads(result.content[0].text)
    assert data["status"] == "answered" and data["citations"] and fake.calls == 1
    _, refused = asyncio.run(run("search-only"))
    assert refused.is_error and "search" in refused.content[0].text


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    """The application in this process (FastAPI's TestClient) over a store; the endpoint left to each test."""
    from fastapi.testclient import TestClient

    from quarry.api.app import ApiConfig, create_app

    store = tmp_path / "store"
    commit(store, [doc(name, texts) for name, texts in DOCS.items()])
    token = KeyRing(FileKeys(store / "keys.json")).create("full", admin=True, rate_limit=0)[1]
    for name in ("OPENAI_API_KEY", "QUARRY_LLM_API_KEY", "QUARRY_LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("QUARRY_EMBED_DIM", "64")

    def make():
        client = TestClient(create_app(ApiConfig(db=str(store))), raise_server_exceptions=False)
        client.headers["Authorization"] = f"Bearer {token}"
        return client

    return make


def sse(text: str) -> list[tuple[str, dict]]:
    events, kind = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            events.append((kind, json.loads(line.removeprefix("data: "))))
    return events


def test_no_endpoint_is_a_json_400_streamed_or_not(in_process):
    with in_process() as http:
        for stream in (False, True):
            response = http.post("/v1/answer", json={"question": QUESTION, "stream": stream})
            assert response.status_code == 400, (stream, response.text)
            assert response.headers["content-type"].startswith("application/json")
            assert "QUARRY_LLM_BASE_URL" in response.json()["error"]["message"]


def test_a_failure_inside_the_stream_is_an_error_event(in_process, fake, monkeypatch):
    import quarry.search.answer

    fake.reset()
    monkeypatch.setenv("QUARRY_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("QUARRY_LLM_MODEL", "fake-chat")

    def broken(*args, **kwargs):
        raise RuntimeError("checker broke\nat /secret/place")

    monkeypatch.setattr(quarry.search.answer, "check", broken)
    with in_process() as http:
        response = http.post("/v1/answer", json={"question": QUESTION, "stream": True})
    assert response.status_code == 200
    events = sse(response.text)
    assert [k for k, _ in events][0] == "evidence" and events[-1] == (
        "error",
        {"message": "internal error (see the server log)"},
    )


def test_one_log_line_per_answer_through_the_normal_logging(in_process, fake, monkeypatch, caplog):
    import logging

    fake.reset()
    fake.chat_handler = lambda body: "The builds ship every Tuesday [1]."
    monkeypatch.setenv("QUARRY_LLM_BASE_URL", fake.base_url)
    monkeypatch.setenv("QUARRY_LLM_MODEL", "fake-chat")
    monkeypatch.setenv("QUARRY_LLM_API_KEY", "sk-in-process-secret")
    caplog.set_level(logging.DEBUG, logger="quarry")
    with in_process() as http:
        for stream in (False, True):
            caplog.clear()
            response = http.post("/v1/answer", json={"question": QUESTION, "style": "text", "stream": stream})
            assert response.status_code == 200, response.text
            # caplog's handler is the root's: a logger of its own (propagate=False) would not reach it
            lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "answer" in r.getMessage()]
            assert len(lines) == 1 and lines[0].startswith("answer for full: answered"), lines
            assert "tokens in" in lines[0] and "total" in lines[0] and "sk-in-process-secret" not in lines[0]
    assert not logging.getLogger("quarry.api.answers").handlers


def test_search_and_answer_share_the_filters_and_their_messages(in_process):
    with in_process() as http:
        asks = [
            ("/v1/search", {"query": QUESTION}),
            ("/v1/answer", {"question": QUESTION}),
            ("/v1/answer", {"question": QUESTION, "stream": True}),
        ]
        for path, body in asks:
            response = http.post(path, json={**body, "where": "file_type = 'pdf"})
            message = response.json()["error"]["message"]
            assert response.status_code == 400 and message.startswith("where: unterminated quote"), message
            too_many = http.post(path, json={**body, "doc": [f"d{i}" for i in range(1001)]})
            assert too_many.status_code == 422 and "doc: at most 1000 items" in too_many.json()["error"]["message"]
