"""An LLM judge of answers: faithfulness to the evidence, answer relevance, context relevance.

The judge sees plain inputs — the question, the answer's text and the evidence passages the answer
was given — so it judges any answering path. One chat request per answer asks for the three
judgments at once, each a score from 1 to 5 with its reason (:data:`JUDGE_PROMPT`, documented in
docs/evaluation.md):

- ``faithfulness``: is every claim of the answer supported by the evidence? (5: all; 1: mostly not);
- ``answer_relevance``: does the answer address the question? (5: fully; 1: not at all);
- ``context_relevance``: do the evidence passages hold what the question needs? (5: all of it; 1: none).

A reply is parsed by :func:`parse_judgment`: a JSON object with the three judgments, each an integer
score in 1..5 and a non-empty reason. Anything else is a :class:`JudgeFailure` — ``malformed`` (no
JSON, a missing judgment, a score out of range), ``refused`` (the model declined), ``error`` (the
endpoint failed) — which is counted and never turned into a score: the means are over the answers
judged, and the failures are reported beside them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from quarry.core.errors import UsageError
from quarry.eval.llmquestions import EvalJob
from quarry.ingest.llm.client import LLMFailure, LLMRuntime, parse_json

__all__ = [
    "CRITERIA",
    "JUDGE_PROMPT",
    "Judgment",
    "JudgeFailure",
    "parse_judgment",
    "Judge",
    "summarise",
    "answers_runner",
    "answer_parts",
]

CRITERIA = ("faithfulness", "answer_relevance", "context_relevance")
MAX_EVIDENCE_CHARS = 6000
JUDGE_PROMPT = (
    "You grade the answer of a question-answering system. You get a QUESTION, the EVIDENCE passages the "
    "system retrieved, and its ANSWER. Grade three things, each with a score from 1 (worst) to 5 (best) "
    "and a one-sentence reason:\n"
    "- faithfulness: is every claim in the ANSWER supported by the EVIDENCE? 5 = all claims supported, "
    "1 = most claims unsupported or contradicted. An answer saying the evidence does not tell is faithful.\n"
    "- answer_relevance: does the ANSWER address the QUESTION? 5 = fully and directly, 1 = not at all.\n"
    "- context_relevance: does the EVIDENCE contain what is needed to answer the QUESTION? 5 = all of it, "
    "1 = nothing relevant.\n"
    'Reply with JSON only: {"faithfulness": {"score": N, "reason": "..."}, '
    '"answer_relevance": {"score": N, "reason": "..."}, "context_relevance": {"score": N, "reason": "..."}}'
)
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {
        c: {
            "type": "object",
            "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "reason": {"type": "string"}},
            "required": ["score", "reason"],
        }
        for c in CRITERIA
    },
    "required": list(CRITERIA),
}
_REFUSAL = re.compile(
    r"\b(i can(?:no|')t|i cannot|i am unable|i'm unable|i won't|i will not|i'm sorry|"
    r"i am sorry|as an ai|not able to (?:help|comply|grade))\b",
    re.IGNORECASE,
)


@dataclass
class Judgment:
    """The judge's scores (1..5) and reasons, per criterion."""

    scores: dict[str, int]
    reasons: dict[str, str]


@dataclass
class JudgeFailure:
    """A judgment that could not be had: ``kind`` is malformed, refused or error; ``detail`` says why."""

    kind: str
    detail: str


def parse_judgment(content: str | None) -> Judgment | JudgeFailure:
    """The judgment in a judge's reply, or why there is none (see the module's docstring)."""
    text = (content or "").strip()
    if not text:
        return JudgeFailure("malformed", "empty reply")
    try:
        data = parse_json(text)
    except ValueError:
        if _REFUSAL.search(text):
            return JudgeFailure("refused", text[:200])
        return JudgeFailure("malformed", "no JSON object in the reply")
    if not isinstance(data, dict):
        return JudgeFailure("malformed", "the reply is not a JSON object")
    scores, reasons = {}, {}
    for name in CRITERIA:
        item = data.get(name)
        if not isinstance(item, dict):
            return JudgeFailure("malformed", f"no {name} judgment")
        score, reason = item.get("score"), item.get("reason")
        if isinstance(score, str) and score.strip().isdigit():
            score = int(score.strip())
        if isinstance(score, float) and score.is_integer():
            score = int(score)
        if not isinstance(score, int) or isinstance(score, bool) or not 1 <= score <= 5:
            return JudgeFailure("malformed", f"{name} score {score!r} is not an integer from 1 to 5")
        if not isinstance(reason, str) or not reason.strip():
            return JudgeFailure("malformed", f"{name} has no reason")
        scores[name], reasons[name] = score, " ".join(reason.split())
    return Judgment(scores, reasons)


def _messages(question: str, answer: str, passages: list[str]) -> list[dict]:
    evidence, used = [], 0
    for i, passage in enumerate(passages, start=1):
        room = MAX_EVIDENCE_CHARS - used
        if room <= 0:
            break
        piece = passage[:room]
        used += len(piece)
        evidence.append(f"[{i}] {piece}")
    user = f"QUESTION: {question}\n\nEVIDENCE:\n" + ("\n\n".join(evidence) or "(none)") + f"\n\nANSWER: {answer}"
    return [{"role": "system", "content": JUDGE_PROMPT}, {"role": "user", "content": user}]


@dataclass
class Judge:
    """Judges (question, answer, evidence) triples with an :class:`~quarry.ingest.llm.client.LLMRuntime`."""

    runtime: LLMRuntime
    failures: dict = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings, store=None) -> Judge:
        if not settings.llm_base_url:
            raise UsageError("the judge needs a chat endpoint: $QUARRY_LLM_BASE_URL (and $QUARRY_LLM_MODEL or --judge)")
        return cls(LLMRuntime(settings, store))

    def judge(self, items: list[tuple[str, str, list[str]]]) -> list[Judgment | JudgeFailure]:
        """One judgment (or failure) per (question, answer text, evidence passages)."""
        # No schema: the reply is judged as text, so that a refusal is told from malformed JSON.
        jobs = [EvalJob(kind="eval_judge", messages=_messages(q, a, p), max_tokens=400) for q, a, p in items]
        out: list[Judgment | JudgeFailure] = []
        for reply in self.runtime.run(jobs):
            if isinstance(reply, LLMFailure):
                out.append(JudgeFailure("error", reply.error))
            else:
                out.append(parse_judgment(reply if isinstance(reply, str) else None))
        return out

    def close(self) -> None:
        self.runtime.close()


def summarise(results: list[Judgment | JudgeFailure], model: str = "") -> dict:
    """Means per criterion over the answers judged (None when none was), and failures counted by kind."""
    judged = [r for r in results if isinstance(r, Judgment)]
    failed: dict[str, int] = {}
    for r in results:
        if isinstance(r, JudgeFailure):
            failed[r.kind] = failed.get(r.kind, 0) + 1
    means = {c: (sum(j.scores[c] for j in judged) / len(judged) if judged else None) for c in CRITERIA}
    return {"model": model, "judged": len(judged), "failed": sum(failed.values()), "failures": failed, "means": means}


def _field(obj, *names, default=None):
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return default


def answer_parts(reply) -> tuple[str, list[str]]:
    """The answer's text and its evidence passages' texts from what ``Index.answer`` returned (an object
    or a dict with ``text``/``answer`` and ``passages``/``evidence``/``sources``/``citations``/``results``)."""
    if isinstance(reply, str):
        return reply, []
    text = _field(reply, "text", "answer", default="")
    evidence = _field(reply, "passages", "evidence", "sources", "citations", "results", default=[]) or []
    passages = []
    for item in evidence:
        passage = item if isinstance(item, str) else _field(item, "text", "passage", "content", default="")
        if passage:
            passages.append(str(passage))
    return str(text or ""), passages


def answers_runner(judge_model: str | None = None, settings=None, judge: Judge | None = None):
    """The ``--answers`` step of ``quarry eval run``: a callable ``(idx, questions, mode)`` that answers each
    question with ``idx.answer(question, mode=mode)`` and judges the answer against its evidence.

    Raises :class:`UsageError` (before any answer) when the index has no answers path."""

    def run(idx, questions: list[dict], mode: str) -> dict:
        if not callable(getattr(idx, "answer", None)):
            raise UsageError(
                "--answers needs the answers path (Index.answer, `quarry ask`), which this quarry does not have"
            )
        nonlocal judge
        if judge is None:
            from quarry.core.settings import Settings

            overrides = {"llm_model": judge_model} if judge_model else {}
            judge = Judge.from_settings(settings or Settings.from_env(**overrides), idx.store)
        items, triples = [], []
        for q in questions:
            text, passages = answer_parts(idx.answer(q["query"], mode=mode))
            triples.append((q["query"], text, passages))
            items.append({"id": q.get("id"), "query": q["query"], "answer": text})
        results = judge.judge(triples)
        for item, result in zip(items, results):
            item["judgment"] = asdict(result) if isinstance(result, Judgment) else None
            item["failure"] = asdict(result) if isinstance(result, JudgeFailure) else None
        model = getattr(judge.runtime, "model", "") or ""
        return {"judge": summarise(results, model), "items": items}

    return run
