"""``POST /v1/answer``: ``Index.answer`` as the caller; ``"stream": true`` answers with Server-Sent Events
(``evidence``, ``token`` ..., then ``answer``: the checked citations; ``error`` with a one-line
``message`` if the answer fails after the stream began), else with the answer's JSON."""

from __future__ import annotations

import json
import logging

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from quarry.api.answering import AnswerRequest, log_answer
from quarry.api.auth import Caller
from quarry.api.deps import caller_of, index_of, json_response, state_of
from quarry.api.errors import Scrubber, status_of
from quarry.core.errors import QuarryError

log = logging.getLogger("quarry.api")
router = APIRouter(prefix="/v1", tags=["answer"])


def _event(kind: str, data) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


@router.post(
    "/answer",
    summary="An answer with checked citations, from what the caller may read",
    description="Retrieves evidence as the caller (the same permissions as search), asks the server's "
    "OpenAI-compatible chat model, checks the citations. status: answered, not_found (no model "
    "call), refused or error (HTTP 502). With stream: Server-Sent Events.",
)
def answer(body: AnswerRequest, request: Request, caller: Caller = Depends(caller_of), index=Depends(index_of)):
    state = state_of(request)
    state.answer_gate().check(caller)
    if not body.stream:
        data = body.run(index, caller.principals)
        log_answer(caller, data)
        return json_response(data, status=502 if data["status"] == "error" else 200)
    # the checks and the retrieval run here: a missing endpoint or a failed search is a JSON error
    events = index.answer_events(body.question, **body.arguments(caller.principals))
    scrub = Scrubber(*state.paths())

    def stream():
        try:
            for kind, value in events:
                if kind == "answer":
                    data = value.to_dict()
                    log_answer(caller, data)
                    yield _event("answer", data)
                elif kind == "token":
                    yield _event("token", {"text": value})
                else:
                    yield _event(kind, value)
        except Exception as exc:  # noqa: BLE001 - the 200 is sent: the failure ends the stream as an event
            yield _event("error", {"message": _message(exc, scrub)})
        finally:
            events.close()  # a client gone early: the model's stream is closed with it

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


def _message(exc: Exception, scrub) -> str:
    """The one line an ``error`` event says; the traceback of an unexpected failure goes to the log."""
    if isinstance(exc, QuarryError) and status_of(exc) < 500:
        return scrub(str(exc))
    log.error("POST /v1/answer: the stream failed", exc_info=exc)
    return "internal error (see the server log)"
