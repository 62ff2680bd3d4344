"""Answers over the API: the request body of ``POST /v1/answer`` and the MCP ``answer`` tool, and the
gate every answer passes first.

Answers cost money (every one may be a paid model call), so a key may be limited to search
(``quarry keys create --no-answers``: 403 on answers) and answers have their own rate limit per
key, apart from the key's request rate: ``--answer-rate-limit`` of the key, else the server's
(``quarry api --answer-rate-limit``, default :data:`DEFAULT_ANSWER_RATE_LIMIT` a minute).
"""

from __future__ import annotations

import logging
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from quarry.api.auth import Caller, KeyRateLimiter
from quarry.api.errors import ApiError
from quarry.api.schemas import Filters, fields
from quarry.search.parameters import ANSWER

log = logging.getLogger("quarry.api.answers")
DEFAULT_ANSWER_RATE_LIMIT = 60  # answers per minute per key
MAX_TURNS = 20  # messages of a conversation
MAX_TURN = 8000  # characters of one message


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = Field(max_length=MAX_TURN)


class _AnswerFields(Filters):
    def arguments(self, principals) -> dict:
        """The keywords of :meth:`quarry.Index.answer` for a caller holding ``principals``."""
        filters = self.filters()
        return {
            "k": self.k,
            "mode": self.mode,
            "filters": filters or None,
            "principals": principals,
            "max_context_tokens": self.max_context_tokens,
            "history": [t.model_dump() for t in self.history] if self.history else None,
        }

    def run(self, index, principals) -> dict:
        """The answer as JSON (not streamed)."""
        got = index.answer(self.question, style=self.style, **self.arguments(principals))
        return got.to_dict()


AnswerRequest = create_model(
    "AnswerRequest",
    __base__=_AnswerFields,
    __doc__="``POST /v1/answer``: a question and :meth:`quarry.Index.answer`'s keywords as "
    ":data:`quarry.search.parameters.ANSWER` declares them, the search's filters (:class:`~quarry.api.schemas.Filters`), "
    "a conversation to condense, streaming.",
    __module__=__name__,
    **fields(ANSWER),
    history=(
        list[Turn] | None,
        Field(None, max_length=MAX_TURNS, description="The conversation so far; condensed into a standalone question."),
    ),
    stream=(bool, Field(False, description="Server-Sent Events: evidence, tokens, then the checked answer.")),
)


class AnswerGate:
    """Whether a caller may have an answer now: its key allows answers, and its answers per minute."""

    def __init__(self, ring, per_minute: int = DEFAULT_ANSWER_RATE_LIMIT, workers: int = 1):
        self.ring = ring
        self.per_minute = per_minute
        self.limiter = KeyRateLimiter(workers)

    def check(self, caller: Caller) -> None:
        """Nothing, or :class:`ApiError` 403 (a search-only key) or 429 (answers spent)."""
        key = self.ring.get(caller.key_id) if caller.key_id else None
        if key is not None and not key.answers:
            raise ApiError(
                403,
                f"the key {key.name} may search but not ask for answers "
                "(`quarry keys create NAME` without --no-answers makes one that may)",
            )
        limit = key.answer_rate_limit if key is not None and key.answer_rate_limit is not None else self.per_minute
        wait = self.limiter.wait(caller.key_id or caller.name, limit)
        if wait > 0:
            raise ApiError(
                429,
                f"{caller.name} asked for more than {limit} answers a minute: retry in {math.ceil(wait)} s",
                headers={"Retry-After": str(math.ceil(wait))},
            )


def log_answer(caller: Caller, data: dict) -> None:
    """The one line per answer (through the server's logging, its format and scrubbing): the key's
    name, status, citations, tokens and times; never the key or the passages."""
    usage, timings = data.get("usage") or {}, data.get("timings") or {}
    log.info(
        "answer for %s: %s, %d citations (%d dropped), tokens in %d out %d, retrieve %.0f ms, generate %.0f ms, "
        "total %.0f ms",
        caller.name,
        data.get("status"),
        len(data.get("citations") or []),
        len(data.get("dropped") or []),
        usage.get("prompt_tokens", 0),
        usage.get("completion_tokens", 0),
        timings.get("retrieve", 0),
        timings.get("generate", 0),
        timings.get("total", 0),
    )
