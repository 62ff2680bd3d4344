"""The Answer panel of the search page: ``GET /answer?q=...`` is the search page with, above the
results, the answer to ``q`` (:meth:`quarry.Index.answer` as the signed-in key, under its answer
permission and rate limit), each ``[n]`` a link to the document view at the cited chunk."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request

from quarry.api.deps import state_of
from quarry.api.errors import ApiError
from quarry.api.web.pages import _form, _results, html_errors, render
from quarry.core.errors import QuarryError

router = APIRouter(include_in_schema=False)
_MARK = re.compile(r"\[(\d+)\]")


def linked(text: str, citations: list[dict]) -> list[tuple[str, dict | None]]:
    """``text`` cut into ``(piece, citation)`` pieces: each ``[n]`` with the citation it names."""
    by_number = {c["number"]: c for c in citations}
    out: list[tuple[str, dict | None]] = []
    at = 0
    for m in _MARK.finditer(text):
        cit = by_number.get(int(m.group(1)))
        if cit is None:
            continue
        if m.start() > at:
            out.append((text[at : m.start()], None))
        out.append((m.group(0), cit))
        at = m.end()
    if at < len(text):
        out.append((text[at:], None))
    return out


def _answer(request: Request, form: dict) -> dict:
    """The panel's context: ``{"answer": dict}`` or ``{"error": message}``."""
    from quarry.api.answering import AnswerRequest, log_answer

    question = form["q"].strip()
    if not question:
        return {}
    caller = request.state.caller
    try:
        state_of(request).answer_gate().check(caller)
        body = {"question": question}
        for name in ("mode", "where", "path", "since", "until"):
            if form[name].strip():
                body[name] = form[name].strip()
        data = AnswerRequest(**body).run(state_of(request).index(), caller.principals)
    except ApiError as exc:
        return {"error": exc.message}
    except QuarryError as exc:
        return {"error": str(exc)}
    except ValueError as exc:  # a form value the request refuses
        return {"error": str(exc).splitlines()[0]}
    log_answer(caller, data)
    for c in data["citations"]:
        c["index"] = c["chunk_id"].rsplit(":", 1)[-1] if c.get("chunk_id") else ""
    data["linked"] = linked(data["text"], data["citations"])
    return {"answer": data}


@router.get("/answer")
@html_errors()
def answer_page(request: Request):
    form = _form(request)
    context = _results(request, form)
    return render(
        request, "answer.html", status=400 if context["error"] else 200, panel=_answer(request, form), **context
    )
