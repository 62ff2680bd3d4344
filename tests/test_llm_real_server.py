"""LLM sectioning and headers against a real model behind a real OpenAI-compatible server.

``make test-llm`` runs these as their own CI step (see tests/llamaserver.py). SmolLM2-135M picks
poor sections, so the assertions are about what quarry guarantees whatever the model says:
valid, tiling sections; a header with the chosen section title; counted calls and tokens;
answers cached; fallbacks named in the report.
"""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from conftest import shared
from llamaserver import MODEL_ALIAS, llama_server  # noqa: F401 - the session fixture
from quarry.ingest.llm import LLMFailure, LLMRuntime
from quarry.ingest.llm.sections import numbered_lines, repair_window, window_job, windows
from quarry.core.settings import Settings

pytestmark = pytest.mark.llm_server

HANDBOOK = ("trees", "sourcegraph-handbook", "content", "company-info-and-process")
FILES = ("policies/acceptable-use-policy.md", "working-at-sourcegraph/switching-teams.md")
WINDOW = 3000  # characters: several windows per file, so boundaries are crossed


def llm_settings(server, **kw) -> Settings:
    values = dict(embed_backend="hash", sectioner="llm", context="llm", llm_base_url=server.base_url,
                  llm_model=MODEL_ALIAS, llm_api_key="", llm_window_chars=WINDOW, llm_concurrency=2)
    return Settings.from_env(**{**values, **kw})


@pytest.fixture
def corpus(tmp_path):
    root = shared(*HANDBOOK)
    tree = tmp_path / "tree"
    for rel in FILES:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, tree / rel)
    return tree


def test_a_real_server_answers_sectioning_requests_with_repairable_json(llama_server, corpus, tmp_path):
    text = (corpus / FILES[0]).read_text()
    lines = numbered_lines(text)
    parts = windows(lines, WINDOW)
    assert len(parts) >= 2
    runtime = LLMRuntime(llm_settings(llama_server), tmp_path)
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

    again = LLMRuntime(llm_settings(llama_server), tmp_path)
    second = again.run([window_job(text, lines, w) for w in parts])
    for first, repeat in zip(answers, second):
        if not isinstance(first, LLMFailure):
            assert repeat == first  # from the cache
    ok = sum(not isinstance(a, LLMFailure) for a in answers)
    assert again.report()["llm_cached"] == ok
    assert again.report()["llm_calls"] >= len(parts) - ok  # only failures are asked again
    again.close()


def runs(cli, db) -> list[dict]:
    done = cli("runs", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_index_with_llm_sections_and_headers_end_to_end(cli, llama_server, corpus, tmp_path):
    db = tmp_path / "db"
    env = {"QUARRY_LLM_BASE_URL": llama_server.base_url, "QUARRY_LLM_MODEL": MODEL_ALIAS, "QUARRY_LLM_API_KEY": "",
           "OPENAI_API_KEY": "", "QUARRY_LLM_WINDOW_CHARS": str(WINDOW), "QUARRY_EMBED_BACKEND": "hash"}
    done = cli("index", corpus, "--db", db, "--sectioner", "llm", "--context", "llm", env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr + llama_server.tail()
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
            sections = con.execute("SELECT section_index, title, start_char, end_char FROM sections "
                                   "WHERE doc_id = ? ORDER BY section_index", [doc_id]).fetchall()
            assert len(sections) == n_sections >= 1
            assert sections[0][2] == 0
            for (_, t, start, end), nxt in zip(sections, sections[1:] + [None]):
                assert t.strip() and len(t) <= 200 and start < end
                if nxt is not None:
                    assert nxt[2] == end  # no gap, no overlap, whatever the model said
            chunks = con.execute("SELECT c.start_char, c.end_char, c.header, s.title, s.start_char, s.end_char "
                                 "FROM chunks c JOIN sections s USING (doc_id, section_index) WHERE c.doc_id = ?",
                                 [doc_id]).fetchall()
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
