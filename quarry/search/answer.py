"""Answers with checked citations, over only what the asker may read: ``Index.answer``.

1. ``history`` (a conversation) is condensed into one standalone question (one chat call).
2. Evidence: the question's hybrid search as the caller's principals, relevant segments,
   duplicates once, budgeted to ``max_context_tokens`` (:mod:`quarry.search.evidence`). A passage
   the caller may not read is never retrieved, so it never reaches a prompt.
3. Not found, not guessed: a weak search (:attr:`SearchResponse.weak`), no evidence, or evidence
   that shares no content word with the question ends here as ``not_found``, with no model call.
4. Generation through the OpenAI-compatible endpoint of the settings (``llm_base_url``,
   ``answer_model`` or ``llm_model``, ``llm_api_key``) with :class:`quarry.ingest.llm.LLMRuntime`:
   retries on 429/5xx/timeouts within a bound, structured output negotiated as the sectioner does.
   An endpoint that says the prompt is over its context length is asked again with half the
   evidence, up to :data:`SHRINKS` times.
5. The answer is checked (:mod:`quarry.search.citations`): invented citations dropped and reported,
   uncited sentences marked, quotes looked up in the cited passages, citations renumbered.

:func:`answer_events` does the same while streaming the model's tokens (prose with ``[n]``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from functools import partial

from quarry.core.errors import QuarryError, UsageError
from quarry.search.citations import Checked, check, describe
from quarry.search.evidence import Passage, content_words, gather, shares_content_word
from quarry.search.parameters import ANSWER, DEFAULT_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS, STYLE
from quarry.search.parameters import check as check_arguments
from quarry.search.prompting import PROMPT_VERSION, answer_messages, answer_schema, condense_messages

__all__ = ["Answer", "answer", "answer_events", "STATUSES", "STYLES", "DEFAULT_CONTEXT_TOKENS"]

STATUSES = ("answered", "not_found", "refused", "error")
STYLES = STYLE.choices
ANSWER_TOKENS = 600  # the answer's own budget
SHRINKS = 3  # times a context-length error is retried with half the evidence
_CONTEXT_LENGTH = re.compile(
    r"context length|context window|maximum context|context_length_exceeded|"
    r"too many tokens|exceeds the (?:model's )?(?:context|maximum)|prompt is too long",
    re.IGNORECASE,
)
_REFUSED = re.compile(r"^\s*(REFUSED|I can(?:no|')t help with that)\b", re.IGNORECASE)
_LEARNED: dict[tuple[str, str], str] = {}  # (endpoint, model) -> the response format it accepted
_CLIENTS: dict[tuple[str, str, float], object] = {}  # one HTTP client per endpoint, key and timeout, kept
_CLIENTS_LOCK = threading.Lock()


def _client(settings):
    """The process's client of the settings' endpoint (making one costs tens of milliseconds, more
    than checking an answer; httpx's client is safe to share between threads)."""
    from quarry.core.openai.client import make_client

    key = (settings.llm_base_url, settings.llm_api_key, float(settings.llm_timeout))
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = make_client(
                settings.llm_base_url, settings.llm_api_key, timeout=float(settings.llm_timeout)
            )
        return _CLIENTS[key]


@dataclass
class Answer:
    """An answer and how it was made.

    ``status``: ``answered``, ``not_found`` (nothing readable answers it; ``searched`` says what was
    searched), ``refused`` (the model declined) or ``error`` (``error`` says why, in one line).
    ``citations`` point into ``evidence`` (the numbered passages the model was given);
    ``dropped`` are citations to numbers never given, ``uncited`` sentences that cite nothing,
    ``quotes`` each quote and whether it was found in a cited passage. ``usage``: calls and tokens
    of the model; ``timings``: milliseconds per stage.
    """

    question: str
    status: str
    text: str = ""
    citations: list = field(default_factory=list)
    evidence: list[Passage] = field(default_factory=list)
    sentences: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    uncited: list[str] = field(default_factory=list)
    quotes: list[dict] = field(default_factory=list)
    standalone_question: str = ""
    searched: dict = field(default_factory=dict)
    model: str = ""
    style: str = ""
    usage: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    generation: int = 0
    error: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def answer(self) -> str:
        return self.text

    def to_dict(self) -> dict:
        out = asdict(self)
        out["answer"] = self.text
        for p in out["evidence"]:
            p.pop("chunk_offsets", None)
        return out


class AnswerError(QuarryError):
    """The endpoint gave no usable answer (after retries); the message is safe to show."""


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


class _Job:
    """A chat request of an answer, in the shape :class:`LLMRuntime` runs (its cache key carries
    this module's prompt version)."""

    def __init__(self, kind: str, messages: list[dict], schema: dict | None = None, max_tokens: int | None = None):
        self.kind, self.messages, self.schema, self.max_tokens = kind, messages, schema, max_tokens
        self.schema_name = kind

    def key(self, model: str) -> str:
        from quarry.ingest.llm.cache import cache_key

        return cache_key(self.kind, model, PROMPT_VERSION, {"messages": self.messages, "schema": self.schema})


def model_of(settings, model: str | None = None) -> str:
    return model or getattr(settings, "answer_model", "") or settings.llm_model_name


def _runtime_class():
    from quarry.ingest.llm.client import LLMFailure, LLMRuntime

    class AnswerRuntime(LLMRuntime):
        """The runtime of answers: the model's content comes back as written (JSON or prose alike are
        read by :func:`quarry.search.citations.check`), so a model that ignores the JSON request
        still answers."""

        @staticmethod
        def _parse(job, content: str):
            return content if content.strip() else LLMFailure("empty answer")

    return AnswerRuntime


def _runtime(settings, model: str, runtime=None):
    if runtime is not None:
        return runtime
    LLMRuntime = _runtime_class()

    _need_endpoint(settings)
    rt = LLMRuntime(settings.model_copy(update={"llm_model": model, "llm_concurrency": 1}), client=_client(settings))
    learned = _LEARNED.get((settings.llm_base_url, model))
    if learned and settings.llm_response_format == "auto":  # what this process learned of the endpoint
        rt.response_format = learned
    return rt


def _ask(rt, job: _Job) -> str | dict:
    """One request through the runtime; :class:`AnswerError` when it fails."""
    from quarry.ingest.llm.client import LLMFailure

    (result,) = rt.run([job])
    if isinstance(result, LLMFailure):
        raise AnswerError(result.error)
    return result


def _standalone(rt, question: str, history) -> str:
    if not history:
        return question
    messages = [m for m in history if isinstance(m, dict) and m.get("content")]
    if not messages:
        return question
    text = _ask(rt, _Job("answer-condense", condense_messages(messages, question), max_tokens=200))
    text = " ".join(str(text).split()).strip().strip('"')
    return text or question


def _not_found(question: str, response, passages, why: str) -> dict:
    return {
        "query": question,
        "mode": response.mode if response is not None else "",
        "filter": response.filter if response is not None else "",
        "passages": len(passages),
        "reason": why,
        "terms": content_words(question),
    }


def _retrieve(index, question, *, k, mode, filters, principals, max_context_tokens):
    t = time.perf_counter()
    response, passages = gather(
        index, question, k=k, mode=mode, filters=filters, principals=principals, max_tokens=max_context_tokens
    )
    why = ""
    if getattr(response, "weak", False):
        why = "no passage passes the relevance threshold"
    elif not passages:
        why = "no readable passage matches"
    elif not shares_content_word(question, passages):
        why = "no passage shares a content word with the question"
    return response, passages, why, _ms(t)


def _checked(index, question: str, k: int, mode: str, max_context_tokens: int | None) -> tuple[str, int]:
    """The question on one line and the tokens of evidence, each argument checked against its
    declaration (:data:`quarry.search.parameters.ANSWER`)."""
    question = " ".join((question or "").split())
    check_arguments(ANSWER, question=question, k=k, mode=mode)
    budget = max_context_tokens or getattr(index.settings, "answer_context_tokens", 0) or DEFAULT_CONTEXT_TOKENS
    return question, MAX_CONTEXT_TOKENS.check(budget)


def answer(
    index,
    question: str,
    *,
    k: int = 8,
    mode: str = "hybrid",
    filters=None,
    principals=None,
    model: str | None = None,
    max_context_tokens: int | None = None,
    history=None,
    style: str = "auto",
    runtime=None,
) -> Answer:
    """Answer ``question`` from the passages ``principals`` may read: see the module's docstring.

    ``style``: ``json`` (structured claims), ``text`` (prose with ``[n]``) or ``auto`` (json).
    ``runtime``: an :class:`quarry.ingest.llm.LLMRuntime` to use (tests); else one is made from the
    index's settings. Never raises for the endpoint's failures: they are ``status`` ``error``.
    """
    question, budget = _checked(index, question, k, mode, max_context_tokens)
    STYLE.check(style)
    settings = index.settings
    name = model_of(settings, model)
    style = "json" if style == "auto" else style
    out = Answer(question=question, status="error", model=name, style=style)
    t_all = time.perf_counter()
    rt = None
    try:
        if history:
            rt = _runtime(settings, name, runtime)
            t = time.perf_counter()
            out.standalone_question = _standalone(rt, question, history)
            out.timings["condense"] = _ms(t)
        asked = out.standalone_question or question
        with index.pinned() as snap:
            out.generation = snap.pointer.generation
            response, passages, why, out.timings["retrieve"] = _retrieve(
                index, asked, k=k, mode=mode, filters=filters, principals=principals, max_context_tokens=budget
            )
        if why:
            out.status, out.searched = "not_found", _not_found(asked, response, passages, why)
            return out
        rt = rt or _runtime(settings, name, runtime)
        t = time.perf_counter()
        checked, out.evidence = _generate(rt, asked, passages, style, out)
        out.timings["generate"] = _ms(t)
        _fill(out, checked, asked, response)
    except AnswerError as exc:
        out.status, out.error = "error", str(exc)
    finally:
        if rt is not None:
            out.usage = rt.usage.as_dict()
            _LEARNED[(settings.llm_base_url, name)] = rt.response_format
            if runtime is None and rt.cache is not None:
                rt.cache.close()  # the client stays, for the next answer
        out.timings["total"] = _ms(t_all)
    return out


def _generate(rt, question: str, passages: list[Passage], style: str, out: Answer):
    """The checked answer and the evidence it was asked over (less, after context-length errors)."""
    for attempt in range(SHRINKS + 1):
        numbers = [p.number for p in passages]
        job = _Job(
            "answer",
            answer_messages(question, passages, style),
            schema=answer_schema(numbers) if style == "json" else None,
            max_tokens=ANSWER_TOKENS,
        )
        try:
            result = _ask(rt, job)
        except AnswerError as exc:
            if _CONTEXT_LENGTH.search(str(exc)) and attempt < SHRINKS and len(passages) > 1:
                passages = passages[: max(1, len(passages) // 2)]
                out.warnings.append(f"the endpoint's context is too small: asked again with {len(passages)} passages")
                continue
            raise
        return check(result if isinstance(result, str) else json.dumps(result), passages), passages
    raise AnswerError("the prompt does not fit the endpoint's context")  # pragma: no cover - loop returns


def _fill(out: Answer, checked: Checked, question: str, response) -> None:
    out.text, out.sentences, out.citations = checked.text, checked.sentences, checked.citations
    out.dropped, out.uncited, out.quotes = checked.dropped, checked.uncited, checked.quotes
    if checked.not_found:
        out.status, out.searched = (
            "not_found",
            _not_found(question, response, out.evidence, "the model found no answer in the passages"),
        )
    elif _REFUSED.match(checked.text or ""):
        out.status = "refused"
    elif not checked.text:
        out.status, out.error = "error", "the model's answer was empty"
    else:
        out.status = "answered"
    counts = describe(checked)
    if counts["dropped"]:
        out.warnings.append(f"{counts['dropped']} citation(s) to passages never given were dropped")
    if counts["quotes"] > counts["quotes_found"]:
        out.warnings.append(f"{counts['quotes'] - counts['quotes_found']} quote(s) not found in the cited passages")


# --- streaming ---------------------------------------------------------------------------------------


def answer_events(
    index,
    question: str,
    *,
    k: int = 8,
    mode: str = "hybrid",
    filters=None,
    principals=None,
    model: str | None = None,
    max_context_tokens: int | None = None,
    history=None,
    client=None,
) -> Iterator[tuple[str, object]]:
    """The answer as events: ``("evidence", [passages])``, then ``("token", text)`` as the model writes
    (prose with ``[n]``), then ``("answer", Answer)`` with the checked citations. A not_found
    question yields only the final answer; no request is made.

    The checks, the condensing of ``history`` and the retrieval run in this call, before the first
    event, so a missing endpoint or a failed search raises here (an API answers it as an error, not a
    broken stream). Closing the iterator early closes the model's stream: it stops generating."""
    question, budget = _checked(index, question, k, mode, max_context_tokens)
    settings = index.settings
    name = model_of(settings, model)
    out = Answer(question=question, status="error", model=name, style="text")
    t_all = time.perf_counter()
    usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "retries": 0}
    asked = question
    if history:
        rt = _runtime(settings, name)
        try:
            t = time.perf_counter()
            asked = out.standalone_question = _standalone(rt, question, history)
            out.timings["condense"] = _ms(t)
            usage.update(rt.usage.as_dict())
        except AnswerError as exc:
            out.error = str(exc)
            out.timings["total"] = _ms(t_all)
            return _only(out)
    with index.pinned() as snap:
        out.generation = snap.pointer.generation
        response, passages, why, out.timings["retrieve"] = _retrieve(
            index, asked, k=k, mode=mode, filters=filters, principals=principals, max_context_tokens=budget
        )
    if why:
        out.status, out.searched = "not_found", _not_found(asked, response, passages, why)
        out.timings["total"] = _ms(t_all)
        return _only(out)
    if client is None:
        _need_endpoint(settings)
        client = _client(settings)
    return _stream(
        client, asked, passages, response, out, usage, t_all, secrets=tuple(s for s in (settings.llm_api_key,) if s)
    )


def _stream(
    client,
    asked: str,
    passages: list[Passage],
    response,
    out: Answer,
    usage: dict,
    t_all: float,
    secrets: tuple[str, ...],
) -> Iterator[tuple[str, object]]:
    """The model's part of :func:`answer_events`: one streamed request (retried, fewer passages
    after context-length errors), its tokens, then the checked answer."""
    from quarry.core.openai.redaction import describe_error
    from quarry.core.openai.retry import call_with_retries
    from quarry.ingest.llm.client import RETRY

    t = time.perf_counter()
    stream = None
    for attempt in range(SHRINKS + 1):
        kwargs = {
            "model": out.model,
            "messages": answer_messages(asked, passages, "text"),
            "temperature": 0,
            "max_tokens": ANSWER_TOKENS,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

        def retried(exc, n, delay):
            usage["retries"] += 1

        try:
            stream = call_with_retries(partial(client.chat.completions.create, **kwargs), RETRY, on_retry=retried)
            usage["calls"] += 1
            break
        except Exception as exc:  # noqa: BLE001 - every endpoint failure becomes status error, in one line
            message = describe_error(exc, *secrets)
            if _CONTEXT_LENGTH.search(message) and attempt < SHRINKS and len(passages) > 1:
                passages = passages[: max(1, len(passages) // 2)]
                out.warnings.append(f"the endpoint's context is too small: asked again with {len(passages)} passages")
                continue
            out.error = message
            break
    out.evidence = passages
    content = []
    try:
        yield "evidence", [p.to_dict() for p in passages]
        if stream is not None:
            try:
                for chunk in stream:
                    if getattr(chunk, "usage", None):
                        usage["prompt_tokens"] += int(chunk.usage.prompt_tokens or 0)
                        usage["completion_tokens"] += int(chunk.usage.completion_tokens or 0)
                    for choice in chunk.choices or []:
                        piece = getattr(choice.delta, "content", None)
                        if piece:
                            content.append(piece)
                            yield "token", piece
            except Exception as exc:  # noqa: BLE001 - a stream cut short: what came is checked, the error named
                out.error = describe_error(exc, *secrets)
    finally:
        if stream is not None:
            stream.close()  # a reader gone early: the model stops and the connection goes back to the pool
    out.timings["generate"] = _ms(t)
    if content:
        _fill(out, check("".join(content), passages), asked, response)
        if out.error and out.status == "answered":
            out.warnings.append(f"the stream ended early: {out.error}")
            out.error = ""
    elif not out.error:
        out.error = "the model's answer was empty"
    out.usage = usage
    out.timings["total"] = _ms(t_all)
    yield "answer", out


def _need_endpoint(settings) -> None:
    """Nothing, or the one error for answers without a model endpoint configured."""
    if not settings.llm_base_url and not settings.llm_api_key:
        raise UsageError(
            "answers need an OpenAI-compatible chat endpoint: set QUARRY_LLM_BASE_URL (a local "
            "server) or QUARRY_LLM_API_KEY (or OPENAI_API_KEY) for the hosted API; docs/answers.md"
        )


def _only(out: Answer):
    """The events of an answer decided before any model call: the answer alone, as a generator (the
    caller closes what it is given when its client leaves)."""
    yield ("answer", out)
