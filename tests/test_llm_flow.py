"""LLM sectioning and context through the real flow and CLI, against a real HTTP fake endpoint."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import SAMPLE
from fakeopenai import FakeOpenAI

import quarry

KEY = "sk-bar-secret-123"
NO_LLM_ENV = {
    "QUARRY_LLM_API_KEY": "",
    "QUARRY_LLM_BASE_URL": "",
    "OPENAI_API_KEY": "",
    "QUARRY_SECTIONER": "",
    "QUARRY_CONTEXT": "",
}
LLM_FIELDS = {"llm_calls", "llm_prompt_tokens", "llm_completion_tokens", "llm_cached", "llm_fallback_windows"}


def scripted(request):
    """What ../shared/checks/llm-sectioning's server answers: a duplicate and an out-of-range section."""
    rf = json.dumps(request.get("response_format") or {})
    if "sections" in rf:
        return {
            "sections": [
                {"title": "Alpha Overview", "start_line": 0},
                {"title": "Alpha Overview", "start_line": 0},
                {"title": "Beta Nowhere", "start_line": 99999},
            ]
        }
    if request.get("response_format"):
        return {"title": "Zebra Logistics Manual", "summary": "Field notes on zebra convoys."}
    return "Field notes on zebra convoys."


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        s.chat_handler = scripted
        yield s


@pytest.fixture
def notes(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    lines = ["Zebra logistics field notes"] + [
        f"Line {i}: the zebra convoy crossed river {i} carrying quinoa and tamarind crates." for i in range(1, 41)
    ]
    (tree / "notes.txt").write_text("\n".join(lines) + "\n")
    return tree


def store_bytes(db):
    return [(p, p.read_bytes()) for p in db.rglob("*") if p.is_file()]


def test_acceptance_check_mirror(cli, server, notes, tmp_path):
    """Mirrors `bash ../shared/checks/llm-sectioning`, with the test embedder."""
    db = tmp_path / "db"
    env = {**NO_LLM_ENV, "QUARRY_LLM_BASE_URL": server.base_url, "QUARRY_LLM_MODEL": "m", "QUARRY_LLM_API_KEY": KEY}
    done = cli("index", notes, "--db", db, "--sectioner", "llm", "--context", "llm", env=env)
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "Traceback" not in output and KEY not in output
    assert all(KEY.encode() not in data for _, data in store_bytes(db))
    first = server.calls
    assert first >= 1
    assert cli("index", notes, "--db", db, "--sectioner", "llm", "--context", "llm", env=env).returncode == 0
    assert server.calls == first
    done = cli("search", "zebra convoy tamarind", "--db", db, "--json", "-k", "3")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert results[0]["section"] == "Alpha Overview" and "Alpha Overview" in results[0]["header"]
    assert results[0]["title"] == "Zebra Logistics Manual"
    assert not any(r["section"] == "Beta Nowhere" for r in results)


def test_flow_caches_every_answer_across_full_and_switches(run_flow, server, tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    db = tmp_path / "db"
    monkeypatch.setenv("QUARRY_LLM_API_KEY", KEY)
    llm = {"sectioner": "llm", "context": "llm", "llm_base_url": server.base_url, "llm_model": "m"}
    first = run_flow([tree], db, overrides=llm)
    assert first["added"] == 5 and first["failed"] == 0
    assert first["llm_calls"] == server.calls > 5 and first["llm_cached"] == 0
    assert first["llm_prompt_tokens"] > 0 and first["llm_completion_tokens"] > 0
    assert first["llm_fallback_windows"] == []
    assert first["settings"]["llm_api_key"] == "***"
    with quarry.open(db) as idx:
        hit = idx.search("deployctl rollback", k=1).results[0]
    # markdown headings stay as the breadcrumb, the model's title is the section
    assert hit.section == "Alpha Overview" and "Alpha Overview" in hit.header
    assert hit.header.startswith("Document: ")  # the document has its own title: kept

    calls = server.calls
    assert run_flow([tree], db, overrides=llm)["llm_calls"] == 0  # unchanged: not even processed
    full = run_flow([tree], db, full=True, overrides=llm)
    assert full["llm_calls"] == 0 and full["llm_cached"] == first["llm_calls"] and full["updated"] == 5
    switched = run_flow([tree], db, overrides={"sectioner": "structure", "context": "rules"})
    assert switched["updated"] == 5 and switched["rebuild"]  # another fingerprint: re-sectioned
    back = run_flow([tree], db, overrides=llm)
    assert back["updated"] == 5 and back["llm_calls"] == 0 and server.calls == calls
    with quarry.open(db) as idx:
        runs = idx.runs(10)
    assert runs[0]["llm_cached"] == first["llm_calls"] and runs[0]["llm_calls"] == 0
    assert all(KEY.encode() not in data for _, data in store_bytes(db))


def test_failures_are_reported_per_window_and_retried_next_time(run_flow, server, notes, tmp_path, monkeypatch):
    from quarry.core.openai.retry import RetryPolicy

    monkeypatch.setattr("quarry.ingest.llm.client.RETRY", RetryPolicy(attempts=2, base=0.001, cap=0.01))
    monkeypatch.setenv("QUARRY_LLM_API_KEY", KEY)
    db = tmp_path / "db"
    server.fail_next(2, status=500, path="/v1/chat/completions")  # the first request's two attempts
    llm = {
        "sectioner": "llm",
        "context": "rules",
        "llm_base_url": server.base_url,
        "llm_model": "m",
        "llm_concurrency": 1,
    }
    report = run_flow([notes], db, overrides=llm)
    assert report["failed"] == 0 and report["chunks"] > 0
    assert [(f["path"].endswith("notes.txt"), f["kind"], f["window"]) for f in report["llm_fallback_windows"]] == [
        (True, "sections", 0)
    ]
    assert report["llm_calls"] == 2
    with quarry.open(db) as idx:
        assert idx.runs(1)[0]["llm_fallback_windows"]  # stored with the run
    again = run_flow([notes], db, full=True, overrides=llm)
    assert again["llm_fallback_windows"] == [] and again["llm_calls"] == 1  # the failure was not cached


def test_runs_json_has_llm_fields(cli, server, notes, tmp_path):
    db = tmp_path / "db"
    env = {**NO_LLM_ENV, "QUARRY_LLM_BASE_URL": server.base_url}  # a local server needs no key
    assert cli("index", notes, "--db", db, "--sectioner", "llm", env=env).returncode == 0
    assert cli("index", notes, "--db", db, "--sectioner", "llm", "--full", env=env).returncode == 0
    runs = json.loads(cli("runs", "--db", db, "--json").stdout)
    assert all(LLM_FIELDS <= set(r) for r in runs)
    assert runs[1]["llm_calls"] >= 1 and runs[1]["llm_cached"] == 0
    assert runs[0]["llm_calls"] == 0 and runs[0]["llm_cached"] == runs[1]["llm_calls"]
    assert runs[0]["llm_fallback_windows"] == []
    text = cli("runs", "--db", db).stdout
    assert "llm 0 calls" in text


def test_key_never_reaches_output_or_store_even_when_echoed(cli, server, notes, tmp_path):
    db = tmp_path / "db"
    server.fail_next(1, status=401, body={"error": {"message": f"Incorrect API key provided: {KEY}"}})
    done = cli(
        "index",
        notes,
        "--db",
        db,
        "--sectioner",
        "llm",
        "--llm-base-url",
        server.base_url,
        "--llm-api-key",
        KEY,
        "--json",
        env=NO_LLM_ENV,
    )
    assert done.returncode == 0, done.stderr
    assert KEY not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["llm_fallback_windows"] and "401" in report["llm_fallback_windows"][0]["error"]
    assert report["settings"]["llm_api_key"] == "***"
    assert all(KEY.encode() not in data for _, data in store_bytes(db))
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"  # it was used, only not shown


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sectioner", "llm"], "--sectioner llm needs an OpenAI-compatible endpoint"),
        (["--context", "llm"], "--context llm needs an OpenAI-compatible endpoint"),
        (["--llm-chunk-context"], "needs an OpenAI-compatible endpoint"),
        (["--sectioner", "gpt"], "Invalid value for '--sectioner'"),
        (["--llm-concurrency", "0"], "Invalid value for '--llm-concurrency'"),
        (["--header-fields", "title,colour"], "unknown header field 'colour'"),
    ],
)
def test_usage_errors_before_any_work(cli, tmp_path, args, message):
    db = tmp_path / "db"
    done = cli("index", SAMPLE, "--db", db, *args, env=NO_LLM_ENV)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not db.exists()


def test_environment_selects_llm_modes(cli, tmp_path):
    env = {**NO_LLM_ENV, "QUARRY_SECTIONER": "llm"}
    done = cli("index", SAMPLE, "--db", tmp_path / "db", "--dry-run", env=env)
    assert done.returncode == 2 and "--sectioner llm needs" in done.stderr
    done = cli("index", SAMPLE, "--db", tmp_path / "db", "--dry-run", env={**env, "OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 0, done.stderr


def test_answers_survive_a_killed_run(cli, server, notes, tmp_path):
    """SIGKILL after the LLM stage: the next run replays every answer and calls nothing."""
    db = tmp_path / "db"
    env = {**NO_LLM_ENV, "QUARRY_LLM_BASE_URL": server.base_url}
    done = cli(
        "index",
        notes,
        "--db",
        db,
        "--sectioner",
        "llm",
        "--context",
        "llm",
        env={**env, "QUARRY_FAULT": "after-vectors"},
    )
    assert done.returncode != 0  # killed before the commit
    paid = server.calls
    assert paid >= 2
    done = cli("index", notes, "--db", db, "--sectioner", "llm", "--context", "llm", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["added"] == 1 and report["llm_calls"] == 0 and report["llm_cached"] == paid
    assert server.calls == paid
