"""The LLM runtime against a real HTTP server (tests/fakeopenai.py): cache, retries, fallback, secrets."""

from __future__ import annotations

import json
import re

import pytest
from fakeopenai import FakeOpenAI, format_style

from quarry.core.models import FileInfo, ParsedDocument
from quarry.core.openai.retry import RetryPolicy
from quarry.core.settings import Settings
from quarry.ingest.llm import Job, LLMFailure, LLMRuntime
from quarry.ingest.llm.cache import CACHE_FILE
from quarry.ingest.llm.client import parse_json
from quarry.ingest.llm.prompts import RESPONSE_FORMATS, SECTIONS_SCHEMA

KEY = "sk-test-secret-4242"
FAST = RetryPolicy(attempts=3, base=0.001, cap=0.01)


def settings(server, **kw):
    values = {
        "embed_backend": "hash",
        "sectioner": "llm",
        "context": "llm",
        "llm_base_url": server.base_url,
        "llm_api_key": KEY,
        "llm_model": "m",
    }
    return Settings.from_env(**{**values, **kw})


def sections_handler(request):
    """Two sections per window: at its first line and half-way."""
    if "sections" not in json.dumps(request.get("response_format") or {}):
        return {"title": "Made-up title", "summary": "What it is about."}
    numbers = [int(n) for n in re.findall(r"^\[(\d+)\]", request["messages"][-1]["content"], re.M)] or [0]
    return {
        "sections": [
            {"title": f"From {numbers[0]}", "start_line": numbers[0]},
            {"title": f"Middle {numbers[0]}", "start_line": numbers[len(numbers) // 2]},
        ]
    }


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        s.chat_handler = sections_handler
        yield s


def job(text="hello"):
    return Job("sections", [{"role": "user", "content": text}], schema=SECTIONS_SCHEMA, schema_name="sections")


def test_requests_ask_for_json_schema_and_count_usage(server, tmp_path):
    rt = LLMRuntime(settings(server), tmp_path, policy=FAST)
    [answer] = rt.run([job()])
    assert answer["sections"][0]["title"].startswith("From") or answer  # parsed JSON came back
    body = server.requests[-1].json
    assert body["model"] == "m" and body["temperature"] == 0
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "sections"
    assert body["response_format"]["json_schema"]["schema"] == SECTIONS_SCHEMA
    assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    report = rt.report()
    assert report["llm_calls"] == 1 and report["llm_prompt_tokens"] > 0 and report["llm_completion_tokens"] > 0


def test_answers_are_cached_across_runtimes_without_the_key(server, tmp_path):
    first = LLMRuntime(settings(server), tmp_path, policy=FAST)
    first.run([job("a"), job("b")])
    # no close(): a run killed now must still have written its answers
    second = LLMRuntime(settings(server), tmp_path, policy=FAST)
    assert second.run([job("a"), job("b")]) == first.run([job("a"), job("b")])
    assert server.calls == 2 and second.report()["llm_calls"] == 0 and second.report()["llm_cached"] == 2
    other_model = LLMRuntime(settings(server, llm_model="m2"), tmp_path, policy=FAST)
    other_model.run([job("a")])
    assert server.calls == 3  # the model is part of the key
    for rt in (first, second, other_model):
        rt.close()
    for path in tmp_path.iterdir():
        assert KEY.encode() not in path.read_bytes(), path


def test_identical_jobs_are_asked_once(server, tmp_path):
    rt = LLMRuntime(settings(server), None, policy=FAST)
    answers = rt.run([job("same"), job("same"), job("other")])
    assert answers[0] == answers[1] and server.calls == 2


def test_retries_on_5xx_and_429_then_succeeds(server, tmp_path):
    server.fail_next(1, status=500)
    server.fail_next(1, status=429, retry_after=0.01)
    rt = LLMRuntime(settings(server), None, policy=FAST)
    [answer] = rt.run([job()])
    assert not isinstance(answer, LLMFailure) and server.calls == 3
    assert rt.report()["llm_retries"] == 2 and rt.report()["llm_calls"] == 3


def test_persistent_5xx_fails_the_job_and_is_not_cached(server, tmp_path):
    server.fail_next(3, status=503)
    rt = LLMRuntime(settings(server), tmp_path, policy=FAST)
    [answer] = rt.run([job()])
    assert isinstance(answer, LLMFailure) and "HTTP 503" in answer.error
    [answer] = rt.run([job()])  # nothing was cached: the next run asks again
    assert not isinstance(answer, LLMFailure) and server.calls == 4


@pytest.mark.parametrize("status", [400, 422])
def test_validation_errors_are_not_retried(server, status):
    server.fail_next(1, status=status)
    rt = LLMRuntime(settings(server), None, policy=FAST)
    [answer] = rt.run([job()])
    assert isinstance(answer, LLMFailure) and server.calls == 1


@pytest.mark.parametrize(
    "accepted, expected",
    [
        ({"json_object_schema"}, "json_object_schema"),  # llama-cpp-python's server
        ({"json_object"}, "json_object"),
        (set(), "none"),  # no response_format at all: the prompt asks for JSON
    ],
)
def test_steps_down_to_the_response_format_the_server_accepts(server, accepted, expected):
    server.response_formats = accepted
    server.chat_handler = lambda request: {"sections": [{"title": "Intro", "start_line": 0}]}
    rt = LLMRuntime(settings(server, llm_concurrency=4), None, policy=FAST)
    answers = rt.run([job(str(i)) for i in range(6)])
    assert all(a == {"sections": [{"title": "Intro", "start_line": 0}]} for a in answers)
    assert rt.response_format == expected and rt.report()["llm_response_format"] == expected
    last = server.requests[-1].json.get("response_format")
    if expected == "json_object_schema":
        assert last == {"type": "json_object", "schema": SECTIONS_SCHEMA}
    elif expected == "none":
        assert last is None
    # each refused form costs at most one request per job in flight, never a retry storm
    refused = [r for r in server.requests if format_style(r.json.get("response_format")) not in accepted | {"none"}]
    assert len(refused) <= 4 * RESPONSE_FORMATS.index(expected)
    assert rt.report()["llm_calls"] == server.calls


def test_a_500_wrapping_a_response_format_validation_error_steps_down_without_retries(server):
    """What llama-cpp-python's server really answers to OpenAI's json_schema."""
    server.response_formats = {"json_object_schema"}
    server.format_refusal_status = 500
    server.chat_handler = lambda request: {"sections": [{"title": "Intro", "start_line": 0}]}
    rt = LLMRuntime(settings(server, llm_concurrency=1), None, policy=FAST)
    [answer] = rt.run([job()])
    assert not isinstance(answer, LLMFailure) and rt.response_format == "json_object_schema"
    assert server.calls == 2 and rt.report()["llm_retries"] == 1  # the refusal, then the answer


def test_a_plain_500_is_retried_not_taken_for_a_format_refusal(server):
    server.fail_next(1, status=500)
    rt = LLMRuntime(settings(server), None, policy=FAST)
    [answer] = rt.run([job()])
    assert not isinstance(answer, LLMFailure) and rt.response_format == "json_schema"


def test_the_accepted_response_format_is_remembered_in_the_store(server, tmp_path):
    server.response_formats = {"json_object_schema"}
    server.chat_handler = lambda request: {"sections": [{"title": request["messages"][-1]["content"], "start_line": 0}]}
    first = LLMRuntime(settings(server), tmp_path, policy=FAST)
    first.run([job("a")])
    assert first.response_format == "json_object_schema" and server.calls == 2
    first.close()
    second = LLMRuntime(settings(server), tmp_path, policy=FAST)
    assert second.response_format == "json_object_schema"
    second.run([job("b")])
    assert server.calls == 3  # no second refusal
    second.close()
    assert server.base_url.encode() not in (tmp_path / CACHE_FILE).read_bytes()


def test_a_pinned_response_format_is_used_and_never_stepped_down(server):
    server.response_formats = {"json_object_schema"}
    rt = LLMRuntime(settings(server, llm_response_format="json_schema"), None, policy=FAST)
    [answer] = rt.run([job()])
    assert isinstance(answer, LLMFailure) and "HTTP 422" in answer.error and server.calls == 1
    rt = LLMRuntime(settings(server, llm_response_format="json_object_schema"), None, policy=FAST)
    [answer] = rt.run([job()])
    assert not isinstance(answer, LLMFailure)


def test_a_422_about_something_else_does_not_change_the_format(server):
    server.fail_next(1, status=422)
    rt = LLMRuntime(settings(server), None, policy=FAST)
    [answer] = rt.run([job()])
    assert isinstance(answer, LLMFailure) and rt.response_format == "json_schema"


def test_unknown_response_format_setting_is_a_config_error(server):
    from quarry.core.errors import ConfigError

    with pytest.raises(ConfigError, match="llm_response_format"):
        settings(server, llm_response_format="yaml")


def test_rejected_key_stops_all_further_calls(server):
    server.api_key = "the-right-key"
    rt = LLMRuntime(settings(server, llm_concurrency=1), None, policy=FAST)
    answers = rt.run([job(str(i)) for i in range(5)])
    assert all(isinstance(a, LLMFailure) for a in answers)
    assert server.calls == 1 and "HTTP 401" in answers[0].error and "no further LLM calls" in answers[-1].error
    assert all(KEY not in a.error for a in answers)


def test_malformed_answers_fail_and_are_not_cached(server, tmp_path):
    server.chat_handler = lambda request: "Sure! Here are the sections: none, really."
    rt = LLMRuntime(settings(server), tmp_path, policy=FAST)
    [answer] = rt.run([job()])
    assert isinstance(answer, LLMFailure) and "not JSON" in answer.error
    rt.run([job()])
    assert server.calls == 2


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('Here you go: {"a": 1} hope it helps', {"a": 1}),
    ],
)
def test_parse_json_tolerates_fences_and_chatter(content, expected):
    assert parse_json(content) == expected


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            '{"sections": [{"title": "A", "start_line": 0}, {"title": "B", "sta',
            {"sections": [{"title": "A", "start_line": 0}]},
        ),
        (
            '{"sections": [{"title": "A } ] \\" {", "start_line": 0}, {"title": "B", "start_line": 4}, {',
            {"sections": [{"title": 'A } ] " {', "start_line": 0}, {"title": "B", "start_line": 4}]},
        ),
        ('{"sections": [[1, 2], [3', {"sections": [[1, 2]]}),
    ],
)
def test_parse_json_keeps_the_complete_part_of_a_truncated_answer(content, expected):
    assert parse_json(content) == expected


@pytest.mark.parametrize("content", ['{"sections": [{"title": "A", "sta', '{"title": "unfinished', "no json", "{]"])
def test_parse_json_refuses_what_cannot_be_salvaged(content):
    with pytest.raises(ValueError):
        parse_json(content)


def test_calls_run_concurrently_up_to_the_limit(server):
    server.delay = 1.0  # long enough that a loaded machine still has them all in flight together
    rt = LLMRuntime(settings(server, llm_concurrency=4), None, policy=FAST)
    rt.run([job(str(i)) for i in range(12)])
    assert server.max_in_flight == 4


def test_batch_windows_of_many_files_share_the_pool(server, tmp_path):
    """Every window of every file of a batch is in flight together, not file after file."""
    from quarry.ingest.process import process_files

    # long enough that a loaded machine still has them all in flight together (1 s once saw 8 of 12
    # in flight in a full CI run: the third file's windows went out as the first ones came back)
    server.delay = 2.0
    files = []
    for i in range(3):
        text = "\n".join(f"File {i} line {n}: words about subject {n // 10} and more." for n in range(120))
        path = tmp_path / f"f{i}.txt"
        path.write_text(text)
        files.append((FileInfo(str(path), str(tmp_path), path.name, "txt", len(text), 0.0, str(i)), f"d{i}"))
    s = settings(server, llm_window_chars=2000, llm_concurrency=16)
    rt = LLMRuntime(s, tmp_path / "store", policy=FAST)
    records, errors, _ = process_files(files, s, llm=rt)
    assert not errors and len(records) == 3
    windows = len(server.calls_to("/v1/chat/completions")) - 3  # minus one document request per file
    assert windows >= 9 and server.max_in_flight >= 9
    for r in records:
        assert r.sections[0].title.startswith("From ") and r.title == "Made-up title"
        assert r.chunks[0].header.startswith("Document: Made-up title\nSummary: What it is about.\nSection: From")


def _long_doc(tmp_path):
    text = (
        "# Heading one\n"
        + "\n".join(f"line {n} with some words about things here." for n in range(80))
        + "\n# Heading two\n"
        + "\n".join(f"line {n} with other words about stuff there." for n in range(80))
    )
    path = tmp_path / "doc.md"
    path.write_text(text)
    return text, FileInfo(str(path), str(tmp_path), "doc.md", "md", len(text), 0.0, "x")


def test_windows_failing_with_5xx_fall_back_to_local_sections(server, tmp_path):
    from quarry.ingest.llm.sections import numbered_lines, windows
    from quarry.ingest.parsers import parse_file
    from quarry.ingest.process import process_files
    from quarry.ingest.sectioning import StructureSectioner

    text, file = _long_doc(tmp_path)
    s = settings(server, llm_window_chars=2000, llm_concurrency=1)
    n_windows = len(windows(numbered_lines(text), 2000))
    server.fail_next(FAST.attempts * n_windows, status=500)  # every window, every attempt
    rt = LLMRuntime(s, None, policy=FAST)
    records, errors, _ = process_files([(file, "d")], s, llm=rt)
    assert not errors
    fallbacks = rt.report()["llm_fallback_windows"]
    assert [(f["path"], f["kind"], f["window"]) for f in fallbacks] == [
        (file.path, "sections", w) for w in range(n_windows)
    ]
    assert all("HTTP 500" in f["error"] for f in fallbacks)
    local = StructureSectioner().sections(parse_file(file.path))
    assert [(x.title, x.start, x.end) for x in records[0].sections] == [(x.title, x.start, x.end) for x in local]
    assert records[0].title == "Heading one" and records[0].summary == "What it is about."


def test_windows_with_malformed_answers_fall_back_alone(server, tmp_path):
    from quarry.ingest.process import process_files

    text, file = _long_doc(tmp_path)
    s = settings(server, llm_window_chars=2000, llm_concurrency=1)

    def handler(request):
        content = request["messages"][-1]["content"]
        if "sections" in json.dumps(request.get("response_format") or {}) and "\n[0] " not in content:
            return '{"sections": [{"title": "cut short'  # not JSON
        return sections_handler(request)

    server.chat_handler = handler
    rt = LLMRuntime(s, None, policy=FAST)
    records, errors, _ = process_files([(file, "d")], s, llm=rt)
    fallbacks = rt.report()["llm_fallback_windows"]
    assert not errors and fallbacks and all(f["error"] == "the answer is not JSON" for f in fallbacks)
    assert 0 not in {f["window"] for f in fallbacks}
    sections = records[0].sections
    assert sections[0].title == "From 0" and sections[0].start == 0 and sections[-1].end == len(text)
    assert all(a.end == b.start for a, b in zip(sections, sections[1:]))
    assert "Heading two" in [x.title for x in sections]  # a local heading inside a failed window


def test_document_context_keeps_the_documents_own_title(server, tmp_path):
    from quarry.ingest.llm.context import document_contexts

    rt = LLMRuntime(settings(server), None, policy=FAST)
    own = ParsedDocument(text="# Real Title\n\nBody text that says things.", title="Real Title")
    none = ParsedDocument(text="plain words with no title at all")
    f = FileInfo("/r/a.txt", "/r", "a.txt", "txt", 1, 0.0, "x")
    out = document_contexts([(f, own, "Real Title", "rule summary"), (f, none, "A", "rule summary")], rt, 100)
    assert out == [("Real Title", "What it is about."), ("Made-up title", "What it is about.")]
    prompt = server.requests[-1].json["messages"][-1]["content"]
    assert len(prompt) < 100 * 4 + 1000  # the input was cut to the token budget
