"""Running batches of chat requests against any OpenAI-compatible endpoint.

:class:`LLMRuntime` is created for each batch of files, in the process that processes it (the
flow's, or a Dask or Ray worker's; ``quarry.ingest.process.process_batch``). It answers a batch of
:class:`Job` s with a bounded thread pool (``llm_concurrency`` requests in flight over every file
of the batch), a rate limiter, retries on 429/5xx/timeouts only (``quarry.core.openai``), and
the persistent answer cache: a job whose answer is cached makes no call at all.

Structured output is asked for in the most precise form the endpoint accepts: OpenAI's
``json_schema`` first; when the server rejects the request because of ``response_format`` (HTTP
400/422 naming it, as llama-cpp-python's server does) the runtime steps down to a schema inside
``json_object``, then plain ``json_object``, then the prompt alone, and keeps the form that
worked for the rest of the run (``llm_response_format`` pins one).

A job that still fails comes back as an :class:`LLMFailure`; callers fall back to local rules for
that piece of work and the run report names it. After an error no request can fix (a rejected
key, an unknown model) the runtime stops calling and fails the rest of the run's jobs at once.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from quarry.core.openai.client import host_of, make_client
from quarry.core.openai.ratelimit import RateLimiter, Usage
from quarry.core.openai.redaction import describe_error, redact
from quarry.core.openai.retry import BadResponse, RetryPolicy, call_with_retries, status_of
from quarry.ingest.llm.cache import CACHE_FILE, LLMCache, cache_key
from quarry.ingest.llm.prompts import RESPONSE_FORMATS, VERSIONS, response_format

log = logging.getLogger("quarry.ingest.llm")

RETRY = RetryPolicy(attempts=4, base=1.0, cap=20.0)
_FATAL_STATUS = frozenset({401, 403, 404})  # wrong key, no access, no such model: every call would fail
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_FORMAT_REJECTED = re.compile(r"response_format|json_schema|json_object|\bschema\b", re.IGNORECASE)
_VALIDATION = re.compile(r"validation error|literal_error|input should be", re.IGNORECASE)


def rejects_response_format(exc: BaseException) -> bool:
    """True when the server refused a request because of its ``response_format``.

    A 400/422 naming it, or a 5xx whose body is a request-validation error about it:
    llama-cpp-python's server wraps its pydantic error ("Input should be 'text' or
    'json_object'") in an HTTP 500, which would otherwise be retried in vain.
    """
    status = status_of(exc)
    if status is None:
        return False
    body = describe_error(exc, limit=2000)
    if status in (400, 422):
        return bool(_FORMAT_REJECTED.search(body))
    return status >= 500 and "response_format" in body and bool(_VALIDATION.search(body))


@dataclass
class Job:
    """One chat request: ``kind`` names the prompt (and its version); ``schema`` asks for JSON."""

    kind: str
    messages: list[dict]
    schema: dict | None = None
    schema_name: str = ""
    max_tokens: int | None = None

    def key(self, model: str) -> str:
        request = {"messages": self.messages, "schema": self.schema, "max_tokens": self.max_tokens}
        return cache_key(self.kind, model, VERSIONS[self.kind], request)


@dataclass(frozen=True)
class LLMFailure:
    """A job that produced no usable answer; ``error`` is safe to log (no key, no request body)."""

    error: str


def parse_json(content: str) -> object:
    """The JSON in a model's answer, tolerating code fences and chatter around one object.

    Raises ``ValueError`` when there is none.
    """
    text = content.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    fenced = _FENCED.search(text)
    if fenced:
        try:
            return json.loads(fenced.group(1))
        except ValueError:
            pass
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(text[start : end + 1])
        except ValueError:
            pass
    if start >= 0:
        closed = close_truncated(text[start:])
        if closed is not None:
            return json.loads(closed)
    raise ValueError("no JSON object in the answer")


def close_truncated(text: str) -> str | None:
    """A JSON answer cut off mid-way (``max_tokens`` reached), closed after its last complete value.

    ``{"sections": [{"title": "A", "start_line": 0}, {"title": "B", "sta`` becomes
    ``{"sections": [{"title": "A", "start_line": 0}]}``. None when no complete value was written,
    or when the text is not a cut-off JSON object.
    """
    stack: list[str] = []
    best: tuple[int, tuple[str, ...]] | None = None
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return text[: i + 1]  # complete after all: chatter followed it
            if stack[-1] == "]":
                best = (i + 1, tuple(stack))  # a complete element of an array
    if best is None:
        return None
    cut, open_ = best
    candidate = text[:cut] + "".join(reversed(open_))
    try:
        json.loads(candidate)
    except ValueError:
        return None
    return candidate


class LLMRuntime:
    """Client, cache, limits and counters of one index run's LLM work."""

    def __init__(
        self, settings, store: Path | None = None, *, client=None, policy: RetryPolicy | None = None, sleep=None
    ):
        self.model = settings.llm_model_name
        self.endpoint = host_of(settings.llm_base_url)
        self._secrets = tuple(s for s in (settings.llm_api_key,) if s)
        self.client = client or make_client(
            settings.llm_base_url, settings.llm_api_key, timeout=float(settings.llm_timeout)
        )
        self.cache = LLMCache(Path(store) / CACHE_FILE) if store is not None else None
        self.concurrency = settings.llm_concurrency
        self.limiter = RateLimiter(settings.llm_rate_limit or None)
        self.policy = policy or RETRY
        self._sleep = sleep
        self.usage = Usage()
        self.cached = 0
        self.failed = 0
        self.fallbacks: list[dict] = []  # {"path", "kind", "window", "error"}
        self._fatal: str | None = None
        self._lock = threading.Lock()
        pinned = getattr(settings, "llm_response_format", "auto") or "auto"
        self._formats = list(RESPONSE_FORMATS) if pinned == "auto" else [pinned]
        self.response_format = self._formats[0]  # the form in use; steps down when the server refuses it
        self._format_fact = ("response_format", settings.llm_base_url or "", self.model)
        if pinned == "auto" and self.cache is not None:
            known = self.cache.learned(*self._format_fact)  # what this endpoint accepted last run
            if known in self._formats:
                self.response_format = known

    # --- public ------------------------------------------------------------------------------

    def run(self, jobs: Sequence[Job]) -> list[str | object | LLMFailure]:
        """Answer every job: parsed JSON for jobs with a schema, text otherwise, or a failure.

        Cached answers are used first; identical jobs are asked once.
        """
        results: list[object] = [None] * len(jobs)
        todo: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            key = job.key(self.model)
            hit = self.cache.get(key) if self.cache else None
            if hit is not None:
                parsed = self._parse(job, hit)
                if not isinstance(parsed, LLMFailure):
                    results[i] = parsed
                    self.cached += 1
                    continue
            todo.setdefault(key, []).append(i)
        if todo:
            keys = list(todo)
            workers = max(1, min(self.concurrency, len(keys)))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="quarry-llm") as pool:
                answers = list(pool.map(lambda k: self._answer(jobs[todo[k][0]], k), keys))
            for key, answer in zip(keys, answers):
                for i in todo[key]:
                    results[i] = answer
        return results

    def note_fallback(self, path: str, kind: str, window: int | None, error: str) -> None:
        """Record that a piece of a file fell back to local rules (for the run report)."""
        with self._lock:
            self.fallbacks.append({"path": path, "kind": kind, "window": window, "error": self.redact(error)})

    def report(self) -> dict:
        """Counters for the run report."""
        u = self.usage.as_dict()
        return {
            "llm_calls": u["calls"] + u["retries"] + self.failed,
            "llm_prompt_tokens": u["prompt_tokens"],
            "llm_completion_tokens": u["completion_tokens"],
            "llm_cached": self.cached,
            "llm_retries": u["retries"],
            "llm_fallback_windows": list(self.fallbacks),
            "llm_response_format": self.response_format,
        }

    def redact(self, text: str) -> str:
        return redact(text, *self._secrets)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
        close = getattr(self.client, "close", None)
        if close:
            close()

    # --- one job -----------------------------------------------------------------------------

    def _answer(self, job: Job, key: str):
        if self._fatal:
            return LLMFailure(self._fatal)
        try:
            content = call_with_retries(
                lambda: self._call(job),
                self.policy,
                on_retry=lambda exc, attempt, delay: self.usage.add_retry(),
                **({"sleep": self._sleep} if self._sleep else {}),
            )
        except Exception as exc:  # noqa: BLE001 - any endpoint failure costs this job alone, named in its error
            with self._lock:
                self.failed += 1
            message = describe_error(exc, *self._secrets)
            if status_of(exc) in _FATAL_STATUS:
                message = f"{self.endpoint} refused the request ({message}); no further LLM calls this run"
                if not self._fatal:
                    log.warning("LLM endpoint %s: %s", self.endpoint, message)
                self._fatal = message
            return LLMFailure(message)
        parsed = self._parse(job, content)
        if not isinstance(parsed, LLMFailure) and self.cache is not None:
            self.cache.put(key, job.kind, self.model, content)  # at once: a crash keeps what was paid for
        return parsed

    def _call(self, job: Job) -> str:
        while True:
            self.limiter.acquire()
            style = self.response_format
            kwargs = {"model": self.model, "messages": job.messages, "temperature": 0}
            if job.schema is not None:
                fmt = response_format(job.schema_name or job.kind, job.schema, style)
                if fmt is not None:
                    kwargs["response_format"] = fmt
            if job.max_tokens:
                kwargs["max_tokens"] = job.max_tokens
            try:
                response = self.client.chat.completions.create(**kwargs)
                break
            except Exception as exc:
                if job.schema is None or not rejects_response_format(exc) or not self._step_down(style, exc):
                    raise
                self.usage.add_retry()  # the refused request was a call too
        choices = getattr(response, "choices", None)
        content = choices[0].message.content if choices else None
        if not isinstance(content, str):
            raise BadResponse("the answer has no message content")
        self.usage.add(getattr(response, "usage", None))
        return content

    def _step_down(self, refused: str, exc: BaseException) -> bool:
        """Move to the next, less precise response format after ``refused`` was rejected.

        False when there is none left. Threads that raced on the same refusal step down once.
        """
        with self._lock:
            if self.response_format != refused:
                return True  # another request already stepped down; retry with the current form
            at = self._formats.index(refused)
            if at + 1 >= len(self._formats):
                return False
            self.response_format = self._formats[at + 1]
            if self.cache is not None:
                self.cache.learn(self.response_format, *self._format_fact)
        log.info(
            "LLM endpoint %s refused response_format %s (%s); using %s",
            self.endpoint,
            refused,
            describe_error(exc, *self._secrets),
            self.response_format,
        )
        return True

    @staticmethod
    def _parse(job: Job, content: str):
        if job.schema is None:
            text = " ".join(content.split())
            return text if text else LLMFailure("empty answer")
        try:
            return parse_json(content)
        except ValueError:
            return LLMFailure("the answer is not JSON")
