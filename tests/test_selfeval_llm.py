"""The ``llm`` question method end to end against a real model behind a real server (``make test-llm``).

SmolLM2-135M writes poor questions; the assertions are what quarry guarantees whatever it says: every
kept question passed the filters and points to a real chunk, every other reply is counted by reason,
and the set is stored, scored and recorded.
"""

from __future__ import annotations

import json

import pytest
from llamaserver import MODEL_ALIAS, live_server, llama_server, required  # noqa: F401 - the fixtures
from test_llm_real_server import handbook

import quarry
from quarry.core.settings import Settings
from quarry.eval.llmquestions import QuestionWriter, check_question
from quarry.eval.scoring import run_set
from quarry.eval.sets import generate_set
from quarry.ingest.llm.client import LLMRuntime

pytestmark = pytest.mark.llm_server

FILES = ("policies/acceptable-use-policy.md", "working-at-sourcegraph/switching-teams.md")


def test_a_small_llm_set_from_a_real_model(live_server, run_flow, tmp_path):
    tree = tmp_path / "tree"
    for rel in FILES:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(handbook(rel).read_bytes())
    db = tmp_path / "store"
    run_flow([tree], db, overrides={"embed_backend": "hash"})
    settings = Settings.from_env(
        embed_backend="hash",
        llm_base_url=live_server.base_url,
        llm_model=MODEL_ALIAS,
        llm_api_key="",
        llm_concurrency=2,
    )
    writer = QuestionWriter(LLMRuntime(settings, db))
    with quarry.open(db) as idx:
        header, path = generate_set(idx, 4, "llm", seed=0, name="llm-real", llm=writer)
        questions = [json.loads(line) for line in path.read_text().splitlines()]
        assert header["questions"] == len(questions)
        asked = writer.runtime.usage.as_dict()["calls"] + writer.runtime.failed
        assert asked >= 1  # the model was asked
        assert len(questions) + sum((header.get("rejected") or {}).values()) >= min(asked, 4)
        for q in questions:
            chunk = idx.chunk(q["chunk_id"])
            assert chunk["doc_id"] == q["doc_id"]
            assert check_question(q["query"], q["answer"], chunk["text"]) is None
        if questions:
            result = run_set(idx, "llm-real", ("bm25",), 10)
            assert result["rows"][0]["questions"] == len(questions)
