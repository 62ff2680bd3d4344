"""The OpenAI-compatible embedder and its retry plumbing, against a real HTTP fake server."""

from __future__ import annotations

import math
import random
import threading
import time
from email.utils import formatdate

import httpx
import numpy as np
import openai
import pytest
from fakeopenai import FakeOpenAI, fake_tokens, fake_vector

from quarry.core.errors import EmbeddingError
from quarry.core.openai.ratelimit import RateLimiter, Usage
from quarry.core.openai.redaction import describe_error, redact
from quarry.core.openai.retry import BadResponse, RetryPolicy, call_with_retries, is_retryable, retry_after
from quarry.ingest.embedders.openai_provider import OpenAIEmbedder

KEY = "sk-test-0123456789abcdef"
FAST = RetryPolicy(attempts=4, base=0.01, cap=0.05)


# -- quarry.core.openai ----------------------------------------------------------------------------


def status_error(status: int, headers: dict | None = None, body: object = None):
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/embeddings", headers={"Authorization": f"Bearer {KEY}"})
    response = httpx.Response(status, headers=headers or {}, request=request)
    cls = {400: openai.BadRequestError, 401: openai.AuthenticationError, 429: openai.RateLimitError}.get(
        status, openai.APIStatusError
    )
    return cls(f"Error code: {status}", response=response, body=body)


def timeout_error():
    return openai.APITimeoutError(request=httpx.Request("POST", "http://127.0.0.1:1/v1/embeddings"))


@pytest.mark.parametrize(
    "headers, expected",
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # the precise header wins
        ({"retry-after": formatdate(1_000_030.0, usegmt=True)}, 30.0),
        ({"retry-after": formatdate(999_000.0, usegmt=True)}, 0.0),  # a date in the past: no wait
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_parses_seconds_milliseconds_and_dates(headers, expected):
    assert retry_after(status_error(429, headers), now=1_000_000.0) == expected


def test_retry_after_without_a_response():
    assert retry_after(timeout_error()) is None
    assert retry_after(ValueError("x")) is None


@pytest.mark.parametrize(
    "status, retryable",
    [
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (408, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
    ],
)
def test_is_retryable_by_status(status, retryable):
    assert is_retryable(status_error(status)) is retryable


def test_is_retryable_transport_errors():
    assert is_retryable(timeout_error())
    assert is_retryable(openai.APIConnectionError(request=httpx.Request("POST", "http://x")))
    assert is_retryable(BadResponse("cut short"))
    assert not is_retryable(ValueError("a bug"))
    assert not is_retryable(EmbeddingError("wrong dimension"))


@pytest.mark.parametrize("attempt", range(8))
def test_full_jitter_stays_within_the_exponential_ceiling(attempt):
    policy = RetryPolicy(base=0.5, cap=4.0, jitter=1.0)
    ceiling = min(4.0, 0.5 * 2**attempt)
    draws = [policy.backoff(attempt, random.Random(seed)) for seed in range(200)]
    assert all(0.0 <= d <= ceiling for d in draws)
    assert max(draws) > 0.8 * ceiling and min(draws) < 0.2 * ceiling  # spread over the whole range


def test_no_jitter_is_plain_exponential_backoff():
    policy = RetryPolicy(base=0.5, cap=3.0, jitter=0.0)
    assert [policy.backoff(a) for a in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_call_with_retries_waits_for_retry_after_and_counts():
    errors = [status_error(429, {"retry-after": "5"}), status_error(503), timeout_error()]
    slept, seen = [], []

    def fn():
        if errors:
            raise errors.pop(0)
        return "ok"

    policy = RetryPolicy(attempts=6, base=1.0, cap=2.0, jitter=0.0)
    result = call_with_retries(fn, policy, sleep=slept.append, on_retry=lambda e, a, d: seen.append((a, d)))
    assert result == "ok"
    assert slept == [5.0, 2.0, 2.0]  # Retry-After beats backoff 1.0; then backoff 2.0, capped 2.0
    assert seen == [(1, 5.0), (2, 2.0), (3, 2.0)]


def test_call_with_retries_caps_retry_after():
    slept = []
    errors = [status_error(429, {"retry-after": "3600"})]

    def fn():
        if errors:
            raise errors.pop(0)
        return 1

    call_with_retries(fn, RetryPolicy(jitter=0.0, max_retry_after=120.0), sleep=slept.append)
    assert slept == [120.0]


def test_call_with_retries_never_retries_final_errors():
    calls = []

    def fn():
        calls.append(1)
        raise status_error(401)

    with pytest.raises(openai.AuthenticationError):
        call_with_retries(fn, RetryPolicy(attempts=5), sleep=lambda s: None)
    assert len(calls) == 1


def test_call_with_retries_gives_up_with_the_last_error():
    calls = []

    def fn():
        calls.append(1)
        raise status_error(500 + len(calls))

    with pytest.raises(openai.APIStatusError) as info:
        call_with_retries(fn, RetryPolicy(attempts=3), sleep=lambda s: None)
    assert len(calls) == 3 and info.value.status_code == 503


def test_rate_limiter_spaces_calls_evenly():
    now = [100.0]
    waits = []

    def sleep(s):
        waits.append(s)
        now[0] += s

    limiter = RateLimiter(60, clock=lambda: now[0], sleep=sleep)  # one a second
    for _ in range(4):
        limiter.acquire()
    assert waits == [1.0, 1.0, 1.0]


def test_rate_limiter_spends_costs():
    now = [0.0]
    waits = []

    def sleep(s):
        waits.append(s)
        now[0] += s

    limiter = RateLimiter(6000, clock=lambda: now[0], sleep=sleep)  # tokens per minute: 100 a second
    for cost in (500, 100, 100):
        limiter.acquire(cost)
    assert waits == pytest.approx([5.0, 1.0])


def test_rate_limiter_unlimited_and_thread_safe():
    assert RateLimiter(None).acquire() == 0.0 and RateLimiter(0).acquire() == 0.0
    limiter = RateLimiter(1200)  # 50 ms apart
    start = time.monotonic()
    threads = [threading.Thread(target=lambda: [limiter.acquire() for _ in range(2)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start >= 7 * 0.05 - 0.01  # 8 slots, the first one immediate


def test_usage_counts_from_many_threads():
    usage = Usage()

    def work():
        for _ in range(500):
            usage.add({"prompt_tokens": 2, "completion_tokens": 1})
            usage.add_retry()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert usage.as_dict() == {"calls": 2000, "prompt_tokens": 4000, "completion_tokens": 2000, "retries": 2000}


def test_redact_and_describe_error_hide_secrets():
    assert redact(f"key {KEY} and {KEY}", KEY, "") == "key *** and ***"
    exc = status_error(401, body={"message": f"Incorrect API key provided: {KEY}"})
    text = describe_error(exc, KEY)
    assert text == "HTTP 401: Incorrect API key provided: ***"
    assert describe_error(timeout_error()) == "request timed out"


# -- the embedder against the fake server ----------------------------------------------------------


@pytest.fixture
def server():
    with FakeOpenAI(dim=32) as s:
        yield s


def make(server, **kw) -> OpenAIEmbedder:
    kw.setdefault("retry", FAST)
    kw.setdefault("timeout", 5.0)
    return OpenAIEmbedder(model="fake-embed", base_url=server.base_url, api_key=KEY, **kw)


def texts_of(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    return [f"text {i}: " + " ".join(rng.choices(words, k=rng.randint(1, 60))) for i in range(n)]


def expected(texts: list[str], dim: int) -> np.ndarray:
    return np.stack([fake_vector(t, dim) for t in texts])


def test_vectors_come_back_in_input_order(server):
    server.shuffle = True
    texts = texts_of(40)
    embedder = make(server, max_inputs=8)
    out = embedder.embed(texts)
    assert out.dtype == np.float32 and out.shape == (40, 32)
    np.testing.assert_allclose(out, expected(texts, 32), atol=1e-6)
    assert embedder.dim == 32  # unknown model: the first response tells the dimension


def test_batches_respect_the_inputs_limit(server):
    server.max_inputs = 7
    texts = texts_of(50)
    embedder = make(server, max_inputs=7)
    embedder.embed(texts)
    sizes = sorted(len(b) for b in server.embedding_inputs)  # arrival order varies with concurrency
    assert sizes == [1] + [7] * 7
    assert sorted(sum(server.embedding_inputs, [])) == sorted(texts)
    assert embedder.splits == 0 and embedder.calls == 8


def test_batches_respect_the_tokens_limit(server):
    server.max_request_tokens = 200
    texts = texts_of(60, seed=1)
    embedder = make(server, max_request_tokens=200, concurrency=1)
    np.testing.assert_allclose(embedder.embed(texts), expected(texts, 32), atol=1e-6)
    batches = server.embedding_inputs
    assert len(batches) > 3
    assert all(sum(fake_tokens(t) for t in b) <= 200 for b in batches)
    assert sum(batches, []) == texts and embedder.splits == 0


def test_large_inputs_are_spread_over_the_concurrent_requests(server):
    texts = [f"{i} " + "lorem ipsum " * 170 for i in range(40)]  # ~700 estimated tokens each
    embedder = make(server, concurrency=4)
    np.testing.assert_allclose(embedder.embed(texts), expected(texts, 32), atol=1e-6)
    assert sorted(len(b) for b in server.embedding_inputs) == [10, 10, 10, 10]
    assert embedder.batch_tokens == 4 * 300_000


def test_an_input_over_the_per_input_limit_is_truncated_and_counted(server):
    server.max_input_tokens = 100
    long = "word " * 1000
    embedder = make(server, max_tokens=100)
    out = embedder.embed(["short", long])
    assert out.shape == (2, 32) and embedder.truncated == 1
    sent = server.embedding_inputs[0][1]
    assert long.startswith(sent) and fake_tokens(sent) <= 100
    assert embedder.count_tokens([sent])[0] <= 100


def test_a_server_with_lower_limits_makes_the_embedder_split_and_remember(server):
    server.max_inputs = 5  # e.g. a local server with a small batch; we assumed 2048
    texts = texts_of(23)
    embedder = make(server)
    np.testing.assert_allclose(embedder.embed(texts), expected(texts, 32), atol=1e-6)
    assert embedder.splits >= 1 and embedder.max_inputs <= 5
    server.reset()
    embedder.embed(texts_of(12, seed=3))
    assert all(len(b) <= 5 for b in server.embedding_inputs) and server.calls == len(server.embedding_inputs)


def test_one_input_over_the_servers_limit_is_a_clear_error(server):
    server.max_input_tokens = 10
    with pytest.raises(EmbeddingError, match="maximum context length.*lower QUARRY_CHUNK_SIZE"):
        make(server).embed(["x" * 400])


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_is_bounded_and_order_kept(server, concurrency):
    server.delay = 0.05
    server.shuffle = True
    texts = texts_of(24)
    embedder = make(server, max_inputs=2, concurrency=concurrency)
    np.testing.assert_allclose(embedder.embed(texts), expected(texts, 32), atol=1e-6)
    assert server.calls == 12
    assert server.max_in_flight == concurrency  # reached, never exceeded


def test_429_retry_after_is_honoured(server):
    server.fail_next(2, status=429, retry_after=3)
    slept = []
    embedder = make(server, sleep=slept.append)
    assert embedder.embed(["a", "b"]).shape == (2, 32)
    assert slept == [3.0, 3.0]  # the server's wait, longer than our backoff
    assert server.calls == 3 and embedder.usage.retries == 2 and embedder.calls == 1


def test_429_retry_after_ms_waits_in_real_time(server):
    server.fail_next(1, status=429, retry_after_ms=200)
    start = time.monotonic()
    make(server).embed(["a"])
    assert time.monotonic() - start >= 0.2


def test_500_is_retried_then_succeeds(server):
    server.fail_next(2, status=500)
    embedder = make(server)
    np.testing.assert_allclose(embedder.embed(["a"]), expected(["a"], 32), atol=1e-6)
    assert server.calls == 3 and embedder.stats()["retries"] == 2


@pytest.mark.parametrize(
    "status, hint",
    [(401, "QUARRY_OPENAI_API_KEY"), (400, "HTTP 400"), (403, "HTTP 403"), (404, "check the model name")],
)
def test_auth_and_validation_errors_are_not_retried(server, status, hint):
    server.fail_next(1, status=status, body={"error": {"message": f"refused for key {KEY}"}})
    embedder = make(server)
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["a", "b"])
    message = str(info.value)
    assert server.calls == 1 and embedder.usage.retries == 0
    assert hint in message and f"HTTP {status}" in message
    assert KEY not in message and KEY not in repr(info.value) and "***" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained openai repr


def test_a_wrong_key_is_reported_without_the_key(server):
    server.api_key = "sk-the-right-one"
    with pytest.raises(EmbeddingError, match="HTTP 401.*QUARRY_OPENAI_API_KEY") as info:
        make(server).embed(["a"])
    assert KEY not in str(info.value) and server.calls == 1


def test_a_timeout_is_retried(server):
    server.delay_next(1, 2.0)
    embedder = make(server, timeout=0.3)
    assert embedder.embed(["a"]).shape == (1, 32)
    assert server.calls == 2 and embedder.usage.retries == 1


def test_gives_up_after_the_attempts_with_a_clear_error(server):
    server.fail_next(10, status=503)
    embedder = make(server)
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["a"])
    message = str(info.value)
    host = server.base_url.split("/")[2]
    assert message.startswith(f"embedding request to {host} failed after 4 attempts: HTTP 503")
    assert KEY not in message and server.calls == 4


def test_gives_up_on_timeouts_naming_the_timeout(server):
    server.delay = 1.0
    with pytest.raises(EmbeddingError, match=r"after 2 attempts: request timed out \(timeout 0.2s\)"):
        make(server, timeout=0.2, retry=RetryPolicy(attempts=2, base=0.01)).embed(["a"])


def test_dimensions_are_asked_for_and_vectors_renormalised(server):
    server.renormalise = False  # a server that cuts Matryoshka vectors without re-normalising
    embedder = make(server, dimensions=8)
    out = embedder.embed(["a", "b", "c"])
    assert out.shape == (3, 8) and embedder.dim == 8
    assert all(r.json["dimensions"] == 8 for r in server.calls_to("/v1/embeddings"))
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    cut = expected(["a", "b", "c"], 32)[:, :8]
    np.testing.assert_allclose(out, cut / np.linalg.norm(cut, axis=1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize(
    "model, dimensions, wrong, message",
    [
        ("fake-embed", 8, 16, "returned 16-d vectors, expected 8"),
        ("text-embedding-3-small", None, 32, "returned 32-d vectors, expected 1536"),
    ],
)
def test_vectors_of_the_wrong_dimension_are_rejected(server, model, dimensions, wrong, message):
    server.wrong_dim = wrong
    embedder = OpenAIEmbedder(model=model, dimensions=dimensions, base_url=server.base_url, api_key=KEY, retry=FAST)
    with pytest.raises(EmbeddingError, match=message):
        embedder.embed(["a"])
    assert server.calls == 1  # not a transient error: no retry


def test_malformed_json_is_retried(server):
    server.malformed_next(1)
    embedder = make(server)
    assert embedder.embed(["a"]).shape == (1, 32) and embedder.usage.retries == 1


def test_malformed_json_every_time_is_a_clear_error(server):
    server.malformed_next(10)
    with pytest.raises(EmbeddingError, match="after 4 attempts: unusable response: invalid JSON"):
        make(server).embed(["a"])


def test_usage_counts_tokens_and_empty_input(server):
    texts = texts_of(10)
    embedder = make(server, max_inputs=4)
    assert embedder.embed([]).shape == (0, 0)
    embedder.embed(texts)
    assert embedder.stats() == {
        "calls": 3,
        "prompt_tokens": sum(fake_tokens(t) for t in texts),
        "retries": 0,
        "truncated": 0,
        "splits": 0,
    }


def test_rate_limit_paces_requests(server):
    embedder = make(server, max_inputs=1, rate_limit=600)  # one request every 0.1 s
    start = time.monotonic()
    embedder.embed(["a", "b", "c", "d"])
    assert time.monotonic() - start >= 0.3


def test_token_rate_limit_paces_by_tokens(server):
    embedder = make(server, max_inputs=1, token_rate_limit=60 * 400)  # 400 estimated tokens a second
    start = time.monotonic()
    embedder.embed(["x" * 297] * 4)  # 100 estimated tokens each: 0.25 s apart
    assert time.monotonic() - start >= 0.7


def test_token_estimate_over_counts_the_servers_tokens():
    embedder = OpenAIEmbedder(model="fake-embed", api_key=KEY)
    for text in texts_of(50) + ["ünïcödé " * 20, "数据" * 30, "x"]:
        assert embedder.count_tokens([text])[0] >= fake_tokens(text)
    assert math.isclose(embedder.count_tokens(["a" * 300])[0], 101)


def test_settings_build_a_working_embedder(server):
    from quarry.core.settings import Settings
    from quarry.ingest.embedders import get_embedder

    settings = Settings.from_env(
        embed_backend="openai",
        embed_model="fake-embed",
        embed_dim=16,
        openai_base_url=server.base_url,
        openai_api_key=KEY,
    )
    embedder = get_embedder(settings)
    assert embedder.model == "fake-embed" and embedder.dim == 16
    out = embedder.embed(["hello", "world"])
    assert out.shape == (2, 16)
    assert server.calls_to("/v1/embeddings")[0].headers["authorization"] == f"Bearer {KEY}"
    assert "OpenAIEmbedder" in repr(type(embedder)) and KEY not in repr(settings)
