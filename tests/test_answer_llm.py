"""``quarry ask`` as a user types it, against a real model behind a real OpenAI-compatible server
(SmolLM2-135M in llama-cpp-python's server; ``make test-llm``, see tests/llamaserver.py).

The model is tiny, so the assertions are what quarry guarantees whatever it writes: an answer over
``data/sample`` is ``answered`` with at least one citation that points to a passage it was given
(the structured-output schema lets the server's grammar write only the numbers given), and a
question about something the sample does not hold is ``not_found`` with no request made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLE
from llamaserver import MODEL_ALIAS, live_server, llama_server  # noqa: F401 - the fixtures

pytestmark = pytest.mark.llm_server


def quarry(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=600,
    )


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory, prefect_api):
    db = tmp_path_factory.mktemp("ask") / "db"
    done = quarry("index", SAMPLE, "--db", db, env={})
    assert done.returncode == 0, done.stderr[-2000:]
    return db


def test_quarry_ask_answers_with_a_valid_citation_and_says_not_found(sample_db, live_server):
    env = {"QUARRY_LLM_BASE_URL": live_server.base_url, "QUARRY_LLM_MODEL": MODEL_ALIAS, "QUARRY_LLM_API_KEY": ""}
    done = quarry(
        "ask",
        "How do we roll back a bad deploy?",
        "--db",
        sample_db,
        "--format",
        "json",
        "--max-context-tokens",
        "1200",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert answer["status"] == "answered", answer
    given = {p["number"]: p for p in answer["evidence"]}
    assert answer["citations"], answer["text"]
    for c in answer["citations"]:
        passage = given[c["passage"]]  # a passage it was given
        assert c["doc_id"] == passage["doc_id"] and c["chunk_id"] in passage["chunk_ids"]
        assert c["path"].startswith(str(SAMPLE))
    assert answer["usage"]["calls"] >= 1 and answer["usage"]["prompt_tokens"] > 0

    text = quarry(
        "ask", "How do we roll back a bad deploy?", "--db", sample_db, "--max-context-tokens", "1200", env=env
    )
    assert text.returncode == 0 and "Sources:" in text.stdout and "[1]" in text.stdout

    absent = quarry(
        "ask", "What is the zorblaxian tariff on moon cheese?", "--db", sample_db, "--format", "json", env=env
    )
    assert absent.returncode == 0, absent.stderr[-2000:]
    got = json.loads(absent.stdout)
    assert got["status"] == "not_found" and not got["usage"].get("calls")  # the model was never asked
    assert got["searched"]["terms"] == ["zorblaxian", "tariff", "moon", "cheese"]
