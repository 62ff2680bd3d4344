"""The answer judge and the llm question method's filters, against a real HTTP server (tests/fakeopenai.py)."""

from __future__ import annotations

import json

import pytest
from fakeopenai import FakeOpenAI

from quarry.core.errors import UsageError
from quarry.core.openai.retry import RetryPolicy
from quarry.core.settings import Settings
from quarry.eval.judge import (
    CRITERIA,
    JUDGE_PROMPT,
    Judge,
    JudgeFailure,
    Judgment,
    answer_parts,
    answers_runner,
    parse_judgment,
    summarise,
)
from quarry.eval.llmquestions import check_question
from quarry.ingest.llm.client import LLMRuntime

FAST = RetryPolicy(attempts=2, base=0.001, cap=0.01)
VALID = {
    "faithfulness": {"score": 5, "reason": "Every claim is in passage 1."},
    "answer_relevance": {"score": 4, "reason": "It answers, with a detour."},
    "context_relevance": {"score": 3, "reason": "One of two passages helps."},
}


def _with(**changes):
    out = json.loads(json.dumps(VALID))
    for name, item in changes.items():
        out[name] = item
    return json.dumps(out)


@pytest.mark.parametrize(
    "reply, expected",
    [
        (
            json.dumps(VALID),
            Judgment(
                {"faithfulness": 5, "answer_relevance": 4, "context_relevance": 3},
                {
                    "faithfulness": "Every claim is in passage 1.",
                    "answer_relevance": "It answers, with a detour.",
                    "context_relevance": "One of two passages helps.",
                },
            ),
        ),
        ("Here you go:\n```json\n" + json.dumps(VALID) + "\n```", "judged"),
        (_with(faithfulness={"score": "5", "reason": "ok"}), "judged"),
        (_with(faithfulness={"score": 5.0, "reason": "ok"}), "judged"),
        (_with(faithfulness={"score": 7, "reason": "off the scale"}), "malformed"),
        (_with(faithfulness={"score": 0, "reason": "below"}), "malformed"),
        (_with(faithfulness={"score": True, "reason": "a bool"}), "malformed"),
        (_with(answer_relevance={"score": 3}), "malformed"),
        (_with(answer_relevance={"score": 3, "reason": "  "}), "malformed"),
        (json.dumps({"faithfulness": VALID["faithfulness"]}), "malformed"),
        ("[1, 2, 3]", "malformed"),
        ("The answer looks fine to me, 5/5.", "malformed"),
        ("", "malformed"),
        (None, "malformed"),
        ("I'm sorry, but I can't help with grading this.", "refused"),
        ("As an AI, I cannot evaluate answers.", "refused"),
    ],
)
def test_parse_judgment(reply, expected):
    result = parse_judgment(reply)
    if isinstance(expected, Judgment):
        assert result == expected
    elif expected == "judged":
        assert isinstance(result, Judgment) and set(result.scores) == set(CRITERIA)
    else:
        assert isinstance(result, JudgeFailure) and result.kind == expected, result


def _settings(server):
    return Settings.from_env(embed_backend="hash", llm_base_url=server.base_url, llm_api_key="k", llm_model="judge-m")


def test_judge_on_a_server_counts_failures_and_never_guesses():
    def handler(request):
        user = request["messages"][-1]["content"]
        assert request["messages"][0]["content"] == JUDGE_PROMPT
        assert "EVIDENCE:\n[1] " in user and "\nANSWER: " in user
        if "valid" in user:
            return VALID
        if "refuse" in user:
            return "I'm sorry, I can't grade that."
        return '{"faithfulness": {"score": 9'  # cut off mid-object

    with FakeOpenAI() as server:
        server.chat_handler = handler
        judge = Judge(LLMRuntime(_settings(server), None, policy=FAST))
        results = judge.judge(
            [("q valid", "a", ["passage one", "passage two"]), ("q refuse", "a", ["p"]), ("q broken", "a", ["p"])]
        )
        judge.close()
        assert isinstance(results[0], Judgment)
        assert [r.kind for r in results[1:]] == ["refused", "malformed"]
        summary = summarise(results, "judge-m")
        assert summary == {
            "model": "judge-m",
            "judged": 1,
            "failed": 2,
            "failures": {"refused": 1, "malformed": 1},
            "means": {"faithfulness": 5.0, "answer_relevance": 4.0, "context_relevance": 3.0},
        }


def test_a_judge_that_fails_to_answer_is_counted():
    with FakeOpenAI() as server:
        server.fail_next(2, status=500)
        judge = Judge(LLMRuntime(_settings(server), None, policy=FAST))
        (result,) = judge.judge([("q", "a", ["p"])])
        judge.close()
    assert isinstance(result, JudgeFailure) and result.kind == "error"
    assert summarise([result]) == {
        "model": "",
        "judged": 0,
        "failed": 1,
        "failures": {"error": 1},
        "means": dict.fromkeys(CRITERIA),
    }


class _Answering:
    """Stands in for an index with an answers path: what the runner needs of it."""

    store = None

    def __init__(self):
        self.asked = []

    def answer(self, question, mode="hybrid"):
        self.asked.append((question, mode))
        return {"text": f"answer to {question}", "passages": [{"text": "evidence valid"}, {"chunk_id": "x"}]}


def test_answers_runner_answers_and_judges():
    with FakeOpenAI() as server:
        server.chat_handler = lambda request: VALID
        judge = Judge(LLMRuntime(_settings(server), None, policy=FAST))
        idx = _Answering()
        out = answers_runner(judge=judge)(idx, [{"id": "q1", "query": "why?"}], "bm25")
        judge.close()
        sent = server.requests[-1].json["messages"][-1]["content"]
    assert idx.asked == [("why?", "bm25")]
    assert "QUESTION: why?" in sent and "[1] evidence valid" in sent and "ANSWER: answer to why?" in sent
    assert out["judge"]["judged"] == 1 and out["judge"]["means"]["faithfulness"] == 5
    (item,) = out["items"]
    assert item["judgment"]["reasons"]["faithfulness"] == "Every claim is in passage 1." and item["failure"] is None


def test_answers_need_the_answers_path():
    class NoAnswers:
        store = None

    with pytest.raises(UsageError, match="--answers needs the answers path"):
        answers_runner(judge=object())(NoAnswers(), [{"query": "q"}], "hybrid")


@pytest.mark.parametrize(
    "reply, expected",
    [
        ({"text": "t", "passages": ["a", {"text": "b"}]}, ("t", ["a", "b"])),
        ({"answer": "t", "citations": [{"content": "c"}]}, ("t", ["c"])),
        ("plain", ("plain", [])),
    ],
)
def test_answer_parts(reply, expected):
    assert answer_parts(reply) == expected


PASSAGE = (
    "Quarterly report. The Lisbon office moved to a new building in March 2024 because the lease on the old "
    "one ended, and the move cost 1.2 million euros including new furniture and network cabling."
)


@pytest.mark.parametrize(
    "question, answer, why",
    [
        ("Why did the Lisbon team change buildings?", "the lease ended", None),
        ("What did relocating the Portuguese office cost?", "1.2 million euros", None),
        ("What is on page 2 of the report?", "x", "formatting"),
        ("Which heading starts the passage?", "Quarterly report", "formatting"),
        ("When did the Lisbon office moved to a new building in March?", "March 2024", "copies"),
        ("What kind of document is this?", "Quarterly report", "first-words"),
    ],
)
def test_check_question(question, answer, why):
    assert check_question(question, answer, PASSAGE) == why
