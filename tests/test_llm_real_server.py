"""LLM sectioning and headers against a real model behind a real OpenAI-compatible server.

``make test-llm`` runs these as their own CI step (see tests/llamaserver.py). SmolLM2-135M picks
poor sections, so the assertions are about what quarry guarantees whatever the model says:
valid, tiling sections; a header with the chosen section title, the section summaries and the
chunk context lines the model wrote; counted calls and tokens; answers cached, also across a
run killed mid-way; fallbacks named in the report.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import duckdb
import pytest
from conftest import ROOT, SHARED
from llamaserver import MODEL_ALIAS, live_server, llama_server, required  # noqa: F401 - the fixtures

from quarry.core.settings import Settings
from quarry.ingest.context import clean_summary
from quarry.ingest.llm import LLMFailure, LLMRuntime
from quarry.ingest.llm.cache import CACHE_FILE
from quarry.ingest.llm.client import parse_json
from quarry.ingest.llm.sections import numbered_lines, repair_window, window_job, windows

pytestmark = pytest.mark.llm_server

HANDBOOK = ("trees", "sourcegraph-handbook", "content", "company-info-and-process")
FILES = ("policies/acceptable-use-policy.md", "working-at-sourcegraph/switching-teams.md")
WINDOW = 3000  # characters: several windows per file, so boundaries are crossed


def handbook(*parts: str):
    """A path in the shared handbook tree; missing, it skips the test, or fails it where the real
    LLM tests are required (``make test-llm``, CI): a required step never passes by skipping."""
    path = SHARED.joinpath(*HANDBOOK, *parts)
    if not path.exists():
        (pytest.fail if required() else pytest.skip)(f"shared data not found: {path}")
    return path


def llm_settings(server, **kw) -> Settings:
    values = {
        "embed_backend": "hash",
        "sectioner": "llm",
        "context": "llm",
        "llm_base_url": server.base_url,
        "llm_model": MODEL_ALIAS,
        "llm_api_key": "",
        "llm_window_chars": WINDOW,
        "llm_concurrency": 2,
    }
    return Settings.from_env(**{**values, **kw})


@pytest.fixture
def corpus(tmp_path):
    root = handbook()
    tree = tmp_path / "tree"
    for rel in FILES:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, tree / rel)
    return tree


def test_a_real_server_answers_sectioning_requests_with_repairable_json(live_server, corpus, tmp_path):
    text = (corpus / FILES[0]).read_text()
    lines = numbered_lines(text)
    parts = windows(lines, WINDOW)
    assert len(parts) >= 2
    runtime = LLMRuntime(llm_settings(live_server), tmp_path)
    answers = runtime.run([window_job(text, lines, w) for w in parts])
    # llama-cpp-python's server refuses OpenAI's json_schema (HTTP 422); the runtime steps down
    # to the schema inside json_object, which the server turns into a grammar.
    assert runtime.response_format == "json_object_schema"
    usable = 0
    for window, answer in zip(parts, answers):
        if isinstance(answer, LLMFailure):
            continue
        repaired = repair_window(answer, window, lines)
        if repaired is None:
            continue
        usable += 1
        starts = [p.line for p in repaired.sections]
        assert starts == sorted(set(starts)) and all(window.lo <= s < window.hi for s in starts)
        # a placeholder title ("...") is dropped here and replaced by the section's opening words later
        assert all(p.title == "" or any(ch.isalnum() for ch in p.title) for p in repaired.sections)
        assert all(len(p.title) <= 120 for p in repaired.sections)
    assert usable >= 1, answers
    report = runtime.report()
    assert report["llm_calls"] >= len(parts) and report["llm_prompt_tokens"] > 0 and report["llm_completion_tokens"] > 0
    runtime.close()

    again = LLMRuntime(llm_settings(live_server), tmp_path)
    second = again.run([window_job(text, lines, w) for w in parts])
    for first, repeat in zip(answers, second):
        if not isinstance(first, LLMFailure):
            assert repeat == first  # from the cache
    ok = sum(not isinstance(a, LLMFailure) for a in answers)
    assert again.report()["llm_cached"] == ok
    assert again.report()["llm_calls"] >= len(parts) - ok  # only failures are asked again
    again.close()


def llm_env(server, **extra) -> dict[str, str]:
    return {
        "QUARRY_LLM_BASE_URL": server.base_url,
        "QUARRY_LLM_MODEL": MODEL_ALIAS,
        "QUARRY_LLM_API_KEY": "",
        "OPENAI_API_KEY": "",
        "QUARRY_LLM_WINDOW_CHARS": str(WINDOW),
        "QUARRY_EMBED_BACKEND": "hash",
        "QUARRY_SECTIONER": "",
        "QUARRY_CONTEXT": "",
        **extra,
    }


def cached(db) -> dict[str, list[str]]:
    """The answers in the store's LLM cache, by request kind."""
    path = db / CACHE_FILE
    if not path.exists():
        return {}
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute("SELECT kind, answer FROM answers").fetchall()
    except sqlite3.OperationalError:  # created, schema not yet written
        rows = []
    finally:
        con.close()
    out: dict[str, list[str]] = {}
    for kind, answer in rows:
        out.setdefault(kind, []).append(answer)
    return out


def runs(cli, db) -> list[dict]:
    done = cli("runs", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_index_with_llm_sections_and_headers_end_to_end(cli, live_server, corpus, tmp_path):
    db = tmp_path / "db"
    env = llm_env(live_server)
    done = cli("index", corpus, "--db", db, "--sectioner", "llm", "--context", "llm", env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr + live_server.tail()
    assert "Traceback" not in done.stdout + done.stderr
    [run] = runs(cli, db)
    assert run["added"] == len(FILES) and run["failed"] == 0
    assert run["llm_calls"] >= len(FILES) * 2 and run["llm_prompt_tokens"] > 0 and run["llm_completion_tokens"] > 0
    for fallback in run["llm_fallback_windows"]:  # whatever the model got wrong is named, not hidden
        assert fallback["path"].endswith(".md") and fallback["error"]

    catalog = next(db.glob("catalog-*.duckdb"))
    with duckdb.connect(str(catalog), read_only=True) as con:
        docs = con.execute("SELECT doc_id, rel_path, title, summary, n_sections FROM documents").fetchall()
        assert len(docs) == len(FILES)
        for doc_id, rel_path, title, summary, n_sections in docs:
            assert title.strip() and summary.strip(), rel_path
            sections = con.execute(
                "SELECT section_index, title, start_char, end_char FROM sections "
                "WHERE doc_id = ? ORDER BY section_index",
                [doc_id],
            ).fetchall()
            assert len(sections) == n_sections >= 1
            assert sections[0][2] == 0
            for (_, t, start, end), nxt in zip(sections, sections[1:] + [None]):
                assert t.strip() and len(t) <= 200 and start < end
                if nxt is not None:
                    assert nxt[2] == end  # no gap, no overlap, whatever the model said
            chunks = con.execute(
                "SELECT c.start_char, c.end_char, c.header, s.title, s.start_char, s.end_char "
                "FROM chunks c JOIN sections s USING (doc_id, section_index) WHERE c.doc_id = ?",
                [doc_id],
            ).fetchall()
            assert chunks
            for c_start, c_end, header, s_title, s_start, s_end in chunks:
                assert s_start <= c_start < c_end <= s_end
                assert s_title in header and title in header

    done = cli("search", "acceptable use of company devices", "--db", db, "--json", "-k", "5", env=env)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert results and all(r["section"] and r["section"] in r["header"] for r in results)

    # The same files again, forced through the whole pipeline: every answer comes from the cache.
    done = cli("index", corpus, "--db", db, "--sectioner", "llm", "--context", "llm", "--full", env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    latest, first = runs(cli, db)[:2]
    assert first["run_id"] == run["run_id"]
    assert latest["llm_cached"] > 0
    # Only what failed the first time (not cached) is asked again.
    assert latest["llm_calls"] <= run["llm_calls"] - latest["llm_cached"]


SHORT = "communication/1-1.md"  # two sections, a few chunks: one request per section and per chunk


def test_section_summaries_and_chunk_context_end_to_end(cli, live_server, tmp_path):
    """--llm-section-summaries and --llm-chunk-context: what the model wrote is in the headers."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(handbook(SHORT), tree / "1-1.md")
    db = tmp_path / "db"
    env = llm_env(live_server, QUARRY_LLM_INPUT_TOKENS="600")  # short prompts: one per chunk
    done = cli(
        "index",
        tree,
        "--db",
        db,
        "--sectioner",
        "structure",
        "--context",
        "llm",
        "--llm-section-summaries",
        "--llm-chunk-context",
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr + live_server.tail()
    [run] = runs(cli, db)
    assert run["added"] == 1 and run["failed"] == 0
    answers = cached(db)
    assert len(answers.get("document", [])) <= 1  # one request per document
    assert answers.get("section_summary") and answers.get("chunk_context"), answers
    for fallback in run["llm_fallback_windows"]:
        assert fallback["path"].endswith("1-1.md") and fallback["error"]

    catalog = next(db.glob("catalog-*.duckdb"))
    with duckdb.connect(str(catalog), read_only=True) as con:
        sections = con.execute("SELECT section_index, summary FROM sections").fetchall()
        chunks = con.execute("SELECT section_index, header FROM chunks").fetchall()
    assert len(answers["section_summary"]) <= len(sections)
    summaries = dict(sections)
    written = set()
    for answer in answers["section_summary"]:
        parsed = parse_json(answer)
        if isinstance(parsed, dict) and isinstance(parsed.get("summary"), str):
            written.add(clean_summary(parsed["summary"]))
    assert any(summaries.values())
    assert {s for s in summaries.values() if s} <= written  # each one the model's own, cleaned
    contexts = {clean_summary(a, 400) for a in answers["chunk_context"]}
    with_context = 0
    for section_index, header in chunks:
        lines = header.split("\n")
        if summaries[section_index]:
            assert f"Section summary: {summaries[section_index]}" in lines, header
        context = [line[len("Context: ") :] for line in lines if line.startswith("Context: ")]
        if context:
            with_context += 1
            assert context[0] in contexts  # the model's own answer, cleaned
    assert with_context >= 1
    paid = sum(map(len, answers.values()))
    assert run["llm_cached"] == 0 and run["llm_calls"] >= paid

    # Unchanged input, forced through the pipeline again: nothing is asked twice.
    done = cli(
        "index",
        tree,
        "--db",
        db,
        "--sectioner",
        "structure",
        "--context",
        "llm",
        "--llm-section-summaries",
        "--llm-chunk-context",
        "--full",
        "--json",
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["llm_cached"] == paid
    if paid == 1 + len(sections) + len(chunks):  # every request answered the first time
        assert report["llm_calls"] == 0


def test_free_form_answers_without_a_grammar_are_repaired_or_fall_back(cli, live_server, corpus, tmp_path):
    """No response_format at all: the small model writes whatever it likes, and every window
    still ends as valid sections, the model's or the structure sectioner's (named)."""
    db = tmp_path / "db"
    env = llm_env(live_server, QUARRY_LLM_RESPONSE_FORMAT="none")
    done = cli("index", corpus / FILES[0], "--db", db, "--sectioner", "llm", env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr + live_server.tail()
    [run] = runs(cli, db)
    assert run["added"] == 1 and run["failed"] == 0 and run["llm_calls"] >= 2
    assert len(cached(db).get("sections", [])) + len(run["llm_fallback_windows"]) >= 2
    for fallback in run["llm_fallback_windows"]:
        assert fallback["path"].endswith(".md") and fallback["error"]
    catalog = next(db.glob("catalog-*.duckdb"))
    with duckdb.connect(str(catalog), read_only=True) as con:
        sections = con.execute("SELECT title, start_char, end_char FROM sections ORDER BY section_index").fetchall()
    assert sections[0][1] == 0
    for (title, start, end), nxt in zip(sections, sections[1:] + [None]):
        assert title.strip() and len(title) <= 200 and start < end
        if nxt is not None:
            assert nxt[1] == end


def test_a_run_killed_while_the_model_answers_replays_what_it_paid_for(cli, prefect_api, live_server, corpus, tmp_path):
    """SIGKILL in the middle of the LLM stage: no generation is committed, and the next run takes
    every answer that arrived before the kill from the cache."""
    db = tmp_path / "db"
    env = {**os.environ, **llm_env(live_server)}
    args = ["index", str(corpus), "--db", str(db), "--sectioner", "llm", "--context", "llm"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "quarry.cli.main", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 600
        while not cached(db) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, f"the run ended before any answer was cached: {proc.stderr.read()!r}"
        paid = cached(db)
        assert paid, "no answer within 600 s"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (db / "CURRENT").exists()  # killed before its commit
    before = cached(db)
    n_before = sum(map(len, before.values()))
    assert n_before >= sum(map(len, paid.values()))

    done = cli(*args, "--json", env=llm_env(live_server), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr + live_server.tail()
    report = json.loads(done.stdout)
    assert report["added"] == len(FILES) and report["failed"] == 0
    assert report["llm_cached"] >= n_before
    after = cached(db)
    for kind, answers in before.items():
        assert set(answers) <= set(after[kind])
