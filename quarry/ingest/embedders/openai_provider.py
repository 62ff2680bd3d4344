"""Embeddings from any OpenAI-compatible API (OpenAI, Azure, vLLM, Ollama, llama.cpp, TEI).

One :meth:`OpenAIEmbedder.embed` call may hold any number of texts. They are packed, in order,
into requests that respect the provider's limits: inputs per request (OpenAI: 2048), tokens per
input (8191) and tokens per request (300K). Requests run ``concurrency`` at a time, optionally
paced by a requests-per-minute limiter, and each is retried on 429, 5xx, timeouts and broken
responses (exponential backoff, full jitter, ``Retry-After`` honoured); never on 400/401/403.

Tokens are estimated without the model's tokenizer (``tiktoken`` is used when installed and
knows the model): one token per three UTF-8 bytes, which over-counts English (about four
characters a token) so that requests stay under the limits. An input over the per-input limit
is cut to it and counted in ``truncated``. A server whose limits are lower than assumed (a local
server with a small batch) answers 400/413/422 "too many tokens/inputs": the request is split in
two and the smaller limits are kept for the rest of the run.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from quarry.core.errors import EmbeddingError
from quarry.core.openai.client import host_of, make_client
from quarry.core.openai.ratelimit import RateLimiter, Usage
from quarry.core.openai.redaction import describe_error, redact
from quarry.core.openai.retry import BadResponse, RetryPolicy, call_with_retries, is_retryable, status_of
from quarry.ingest.embedders.base import EMBEDDERS, normalise

if TYPE_CHECKING:
    import openai

log = logging.getLogger("quarry.ingest.embedders.openai")

DEFAULT_MODEL = "text-embedding-3-small"
_KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
MAX_INPUTS = 2048  # inputs per request (OpenAI)
MAX_INPUT_TOKENS = 8191  # tokens per input (OpenAI text-embedding-3-*)
MAX_REQUEST_TOKENS = 300_000  # tokens per request (OpenAI)
MIN_SPLIT_TOKENS = 4096  # smaller requests are not worth their overhead for parallelism
BYTES_PER_TOKEN = 3  # conservative: English BPE averages about four characters a token

# What servers say when a request is over their size limits (OpenAI, vLLM, llama.cpp, TEI, Ollama).
_LIMIT_WORDS = re.compile(r"token|context length|too (many|large|long)|batch size|maximum|exceed", re.I)


def known_dim(model: str) -> int:
    """The native dimension of a well-known model; 0 when unknown (found on first call)."""
    return _KNOWN_DIMS.get(model, 0)


def _tiktoken_encoding(model: str):
    """The tiktoken encoding of ``model`` when tiktoken is installed and knows it, else None."""
    try:
        import tiktoken

        return tiktoken.encoding_for_model(model)
    except Exception:  # noqa: BLE001 - not installed, unknown model, or its BPE file cannot be fetched offline
        return None


class OpenAIEmbedder:
    """Embeds through the ``openai`` client; key, base URL and model come from settings.

    ``usage`` counts calls, prompt tokens and retries; ``truncated`` counts inputs cut to
    ``max_tokens``. Errors are :class:`EmbeddingError` naming the host and status, never the key.
    """

    backend = "openai"

    def __init__(
        self,
        model: str | None = None,
        dimensions: int | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        concurrency: int = 4,
        rate_limit: float | None = None,
        token_rate_limit: float | None = None,
        max_inputs: int = MAX_INPUTS,
        max_tokens: int = MAX_INPUT_TOKENS,
        max_request_tokens: int = MAX_REQUEST_TOKENS,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], object] = time.sleep,
    ):
        self.model = model or DEFAULT_MODEL
        self.requested_dim = dimensions or None
        self.dim = dimensions or known_dim(self.model)
        self.base_url = base_url or ""
        self.host = host_of(self.base_url)
        self.timeout = timeout
        self.concurrency = max(1, int(concurrency))
        self.max_inputs = max(1, int(max_inputs))
        self.max_request_tokens = max(1, int(max_request_tokens))
        self.max_tokens = max(1, min(int(max_tokens), self.max_request_tokens))
        self.retry = retry
        self.usage = Usage()
        self.truncated = 0
        self.splits = 0  # requests split because the server's limits were lower than assumed
        self._api_key = api_key or ""
        self._sleep = sleep
        self._limiter = RateLimiter(rate_limit)  # requests per minute
        self._token_limiter = RateLimiter(token_rate_limit)  # estimated tokens per minute
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()
        self._encoding = _tiktoken_encoding(self.model)

    @classmethod
    def from_settings(cls, settings) -> OpenAIEmbedder:
        """The embedder ``settings`` describe (fields not yet in Settings fall back to defaults)."""

        def get(name, default):
            return getattr(settings, name, default) or default

        return cls(
            model=settings.embed_model or None,
            dimensions=settings.embed_dim or None,
            base_url=settings.openai_base_url or None,
            api_key=settings.openai_api_key or None,
            timeout=float(get("openai_timeout", 60.0)),
            concurrency=int(get("embed_concurrency", 4)),
            rate_limit=float(get("embed_rate_limit", 0.0)) or None,
            token_rate_limit=float(get("embed_token_rate_limit", 0.0)) or None,
            max_inputs=int(get("embed_max_inputs", MAX_INPUTS)),
            max_request_tokens=int(get("embed_request_tokens", MAX_REQUEST_TOKENS)),
            retry=RetryPolicy(attempts=int(get("openai_attempts", RetryPolicy.attempts))),
        )

    plans_batches = True  # it packs requests by the provider's limits and sends them concurrently

    @property
    def calls(self) -> int:
        """Successful API requests so far."""
        return self.usage.calls

    def stats(self) -> dict[str, int]:
        """Counters for the run report: calls, prompt_tokens, retries, truncated, splits."""
        out = self.usage.as_dict()
        out.pop("completion_tokens", None)
        out.update(truncated=self.truncated, splits=self.splits)
        return out

    # -- tokens --------------------------------------------------------------------------------

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens each text costs: exact with tiktoken, else a conservative estimate."""
        if self._encoding is not None:
            return [len(self._encoding.encode(t, disallowed_special=())) for t in texts]
        return [len(t.encode("utf-8")) // BYTES_PER_TOKEN + 1 for t in texts]

    def _fit(self, text: str, limit: int) -> str:
        """``text`` cut so that it counts at most ``limit`` tokens."""
        if self._encoding is not None:
            ids = self._encoding.encode(text, disallowed_special=())
            return self._encoding.decode(ids[:limit])
        return text.encode("utf-8")[: (limit - 1) * BYTES_PER_TOKEN].decode("utf-8", errors="ignore")

    # -- embedding -----------------------------------------------------------------------------

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors for ``texts`` in order, shape (len(texts), dim), unit length, float32."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = [t if t.strip() else " " for t in texts]  # OpenAI rejects empty inputs
        counts = self.count_tokens(texts)
        for i, n in enumerate(counts):
            if n > self.max_tokens:
                texts[i] = self._fit(texts[i], self.max_tokens)
                counts[i] = self.count_tokens([texts[i]])[0]
                with self._lock:
                    self.truncated += 1
        batches = self.plan(counts)
        if len(batches) == 1 or self.concurrency == 1:
            parts = [self._embed_batch([texts[i] for i in b], [counts[i] for i in b]) for b in batches]
        else:
            with ThreadPoolExecutor(
                max_workers=min(self.concurrency, len(batches)), thread_name_prefix="quarry-embed"
            ) as pool:
                futures = [
                    pool.submit(self._embed_batch, [texts[i] for i in b], [counts[i] for i in b]) for b in batches
                ]
                try:
                    parts = [f.result() for f in futures]
                except BaseException:
                    for f in futures:  # stop queued requests; running ones finish on their own
                        f.cancel()
                    raise
        return np.concatenate(parts, axis=0)

    @property
    def batch_tokens(self) -> int:
        """Tokens worth handing to one :meth:`embed` call: enough to fill every concurrent request."""
        return self.max_request_tokens * self.concurrency

    def plan(self, counts: list[int]) -> list[list[int]]:
        """Indices of consecutive inputs per request, within the inputs and tokens limits.

        Large inputs are spread over about ``concurrency`` requests (of no fewer than
        ``MIN_SPLIT_TOKENS`` tokens each), so that they run in parallel rather than in one
        request that fills the provider's limit.
        """
        out: list[list[int]] = []
        cur: list[int] = []
        used = 0
        max_inputs, max_request_tokens = self.max_inputs, self.max_request_tokens
        share = max(MIN_SPLIT_TOKENS, sum(counts) / self.concurrency)  # a soft target below the limit
        for i, n in enumerate(counts):
            if cur and (len(cur) >= max_inputs or used + n > max_request_tokens or used + n / 2 > share):
                out.append(cur)
                cur, used = [], 0
            cur.append(i)
            used += n
        if cur:
            out.append(cur)
        return out

    def _embed_batch(self, texts: list[str], counts: list[int]) -> np.ndarray:
        try:
            return self._request(texts, sum(counts))
        except _OverLimit as over:
            if len(texts) > 1:
                self._learn_limits(len(texts), sum(counts), over.message)
                groups = self.plan(counts)
                if len(groups) == 1:  # limits learned meanwhile by another thread still allow it
                    half = len(texts) // 2
                    groups = [list(range(half)), list(range(half, len(texts)))]
                return np.concatenate(
                    [self._embed_batch([texts[i] for i in g], [counts[i] for i in g]) for g in groups]
                )
            raise EmbeddingError(
                f"embedding request to {self.host} failed: {over.message} (one input of about {counts[0]} "
                f"tokens, model {self.model}); lower QUARRY_CHUNK_SIZE"
            ) from None

    def _learn_limits(self, n_inputs: int, n_tokens: int, message: str) -> None:
        with self._lock:
            self.splits += 1
            self.max_inputs = min(self.max_inputs, max(1, n_inputs // 2))
            self.max_request_tokens = min(self.max_request_tokens, max(self.max_tokens, n_tokens // 2))
        log.warning(
            "%s refused %d inputs (~%d tokens): %s; sending at most %d inputs / ~%d tokens per request",
            self.host,
            n_inputs,
            n_tokens,
            message,
            self.max_inputs,
            self.max_request_tokens,
        )

    def _get_client(self):
        with self._lock:
            if self._client is None:
                self._client = make_client(self.base_url, self._api_key, timeout=self.timeout)
            return self._client

    def _request(self, texts: list[str], tokens: int) -> np.ndarray:
        """One API request, retried; returns unit vectors in input order."""
        kwargs: dict[str, Any] = {"model": self.model, "input": texts}
        if self.requested_dim:
            kwargs["dimensions"] = self.requested_dim
        client = self._get_client()

        def call():
            self._limiter.acquire()
            self._token_limiter.acquire(tokens)
            try:
                response = client.embeddings.create(**kwargs)
            except ValueError as exc:  # the body of a 200 was not JSON
                raise BadResponse(f"invalid JSON ({type(exc).__name__})") from None
            return response, self._vectors(response, len(texts))

        def on_retry(exc, attempt, delay):
            self.usage.add_retry()
            log.info(
                "embedding request to %s failed (%s), retry %d in %.1fs",
                self.host,
                describe_error(exc, self._api_key),
                attempt,
                delay,
            )

        try:
            response, vectors = call_with_retries(call, self.retry, sleep=self._sleep, on_retry=on_retry)
        except EmbeddingError:
            raise
        except Exception as exc:  # noqa: BLE001 - every endpoint or SDK failure becomes one EmbeddingError naming its cause
            status = status_of(exc)
            detail = describe_error(exc, self._api_key)
            if status in (400, 413, 422) and _LIMIT_WORDS.search(detail) and "dimension" not in detail.lower():
                raise _OverLimit(detail) from None
            raise EmbeddingError(self._give_up_message(exc, status, detail)) from None
        self.usage.add(getattr(response, "usage", None))
        return vectors

    def _give_up_message(self, exc: Exception, status: int | None, detail: str) -> str:
        tried = f" after {self.retry.attempts} attempts" if is_retryable(exc) else ""
        hint = ""
        if status == 401:
            hint = "; check QUARRY_OPENAI_API_KEY (or OPENAI_API_KEY)"
        elif status == 404:
            hint = f"; check the model name ({self.model}) and QUARRY_OPENAI_BASE_URL"
        elif "timed out" in detail:
            hint = f" (timeout {self.timeout:g}s)"
        message = f"embedding request to {self.host} failed{tried}: {detail}{hint}"
        return redact(message, self._api_key)

    def _vectors(self, response, n: int) -> np.ndarray:
        """Check and normalise a response's vectors; raises BadResponse or EmbeddingError."""
        try:
            data = sorted(response.data, key=lambda d: d.index)
            rows = [d.embedding for d in data]
        except (AttributeError, TypeError) as exc:
            raise BadResponse(f"no embeddings in the response ({type(exc).__name__})") from None
        if len(rows) != n:
            raise BadResponse(f"{len(rows)} vectors for {n} inputs")
        if rows and isinstance(rows[0], str):  # encoding_format="base64", as some servers default to
            import base64

            vectors = np.stack([np.frombuffer(base64.b64decode(r), dtype="<f4") for r in rows])
        else:
            try:
                vectors = np.asarray(rows, dtype=np.float32)
            except ValueError:
                raise EmbeddingError(f"{self.host} returned vectors of different lengths") from None
        if vectors.ndim != 2:
            raise BadResponse(f"vectors of shape {vectors.shape}")
        got = vectors.shape[1]
        with self._lock:
            expected = self.requested_dim or self.dim
            if expected and got != expected:
                raise EmbeddingError(f"{self.host} returned {got}-d vectors, expected {expected} (model {self.model})")
            self.dim = got
        # re-normalise: a server that cuts to `dimensions` (Matryoshka) may not, and OpenAI's
        # vectors are unit length only to float precision
        return normalise(vectors)


class _OverLimit(Exception):
    """A request larger than the server accepts (400/413/422 naming tokens, inputs or batch size)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@EMBEDDERS.register("openai")
def _openai(settings, **kw) -> OpenAIEmbedder:
    return OpenAIEmbedder.from_settings(settings)
