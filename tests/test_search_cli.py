"""``quarry search`` on a real mixed-format store: filters, windows, segments, rerank, formats, errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import shared
from fakeopenai import FakeOpenAI
from test_rerank import tiny_cross_encoder  # noqa: F401 - the fixture, built once for this module

from quarry.cli.main import cli as cli_group

RETRIEVER_KEYS = {"vector", "bm25"}


@pytest.fixture(scope="module")
def db(tmp_path_factory, prefect_api):
    from quarry.flows.index import index_flow

    store = tmp_path_factory.mktemp("search") / "db"
    index_flow([str(shared("formats"))], db=str(store))
    return store


def run(*args, env=None):
    """The CLI in-process; ``.stdout``/``.stderr`` apart, exit code as a user sees it."""
    return CliRunner(env=env).invoke(cli_group, ["search", *map(str, args)])


def as_json(done) -> dict:
    assert done.exit_code == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "flags", [["--where", "file_type = 'pdf'"], ["--where", "file_type=pdf"], ["--type", "pdf"], ["--path", "*.pdf"]]
)
def test_filtered_search_returns_only_pdfs(db, flags):
    out = as_json(run("table", "--db", db, *flags, "--json", "-k", "5"))
    assert out["results"] and all(r["path"].endswith(".pdf") for r in out["results"])
    assert out["filter"]


def test_hostile_filter_is_harmless(db):
    done = run("x'; DROP TABLE chunks; --", "--db", db, "--where", "file_type = 'pdf'' OR 1=1 --'", "--json")
    assert done.exit_code in (0, 2) and "Traceback" not in done.output
    assert as_json(run("table", "--db", db, "--json", "-k", "1"))["results"]


def test_window_json_adds_windows_and_keeps_results(db):
    out = as_json(run("table", "--db", db, "--window", "1,1", "--json", "-k", "3"))
    assert len(out["results"]) == 3
    assert all({"path", "section", "header", "text"} <= set(r) for r in out["results"])
    windows = out["windows"]
    assert windows and sorted(h for w in windows for h in w["hits"]) == [1, 2, 3]
    by_rank = {r["rank"]: r for r in out["results"]}
    for w in windows:
        assert {
            "path",
            "section",
            "header",
            "text",
            "first_chunk",
            "last_chunk",
            "start_char",
            "end_char",
            "page_start",
            "page_end",
            "hits",
            "score",
        } <= set(w)
        for h in w["hits"]:
            assert by_rank[h]["text"] in w["text"] and by_rank[h]["path"] == w["path"]
            assert w["first_chunk"] <= by_rank[h]["chunk_index"] <= w["last_chunk"]


def test_jsonl_writes_one_object_per_line(db):
    done = run("table", "--db", db, "--format", "jsonl", "-k", "4")
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.exit_code == 0 and [r["rank"] for r in rows] == [1, 2, 3, 4]
    windows = [
        json.loads(line)
        for line in run("table", "--db", db, "--format", "jsonl", "-k", "4", "--window", "0,1").stdout.splitlines()
    ]
    assert windows and all("first_chunk" in w for w in windows)


def test_explain_in_json_and_table(db):
    out = as_json(run("table", "--db", db, "--explain", "--json", "-k", "3"))
    for r in out["results"]:
        assert set(r["explain"]) >= RETRIEVER_KEYS | {"fused"}
        assert r["explain"]["fused"] == pytest.approx(r["fused"])
        for name in RETRIEVER_KEYS:
            assert r["explain"][name] == {"rank": r["ranks"][name], "score": r["scores"][name]}
    table = run("table", "--db", db, "--explain", "-k", "3")
    assert table.exit_code == 0 and "vector rank" in table.stdout and "fused" in table.stdout


def test_default_output_is_a_table(db):
    done = run("table", "--db", db, "-k", "2")
    # "table" now also matches the slide with a table and the spreadsheets of the formats folder
    assert done.exit_code == 0 and "score" in done.stdout
    assert any(ext in done.stdout for ext in (".pdf", ".docx", ".pptx", ".xlsx", ".csv"))


@pytest.mark.parametrize("preset", [None, "precision", "find_all"])
def test_segments_json(db, preset):
    args = ["--segments"] + ([preset] if preset else []) + ["--json", "-k", "2"]
    out = as_json(run("LayoutParser document image analysis", "--db", db, *args))
    assert len(out["results"]) == 2
    for s in out["segments"]:
        assert s["first_chunk"] <= s["last_chunk"] and s["text"] and s["path"]
        assert s["score"] >= {"precision": 0.7, "find_all": 0.4}.get(preset, 0.5)
    assert [s["rank"] for s in out["segments"]] == list(range(1, len(out["segments"]) + 1))


def test_weights_and_min_scores_reach_the_search(db):
    out = as_json(run("table", "--db", db, "--weights", "vector=0.5,bm25=1", "--min-score", "bm25=0.5", "--json"))
    assert out["weights"] == {"vector": 0.5, "bm25": 1.0, "documents": 1.0} and out["min_scores"] == {"bm25": 0.5}
    off = as_json(run("table", "--db", db, "--weights", "documents=0", "--json"))
    assert off["weights"] == {"vector": 1.0, "bm25": 1.0}  # the document evidence switched off


def test_llm_rerank_through_the_cli(db):
    with FakeOpenAI() as server:
        server.chat_handler = lambda request: {"ranking": [3, 2, 1]}
        env = {"QUARRY_LLM_BASE_URL": server.base_url, "QUARRY_LLM_MODEL": "fake-chat", "QUARRY_LLM_API_KEY": "k"}
        plain = as_json(run("table", "--db", db, "--json", "-k", "3"))
        out = as_json(
            run("table", "--db", db, "--json", "-k", "3", "--rerank", "llm", "--rerank-candidates", "3", env=env)
        )
        assert server.calls == 1
    assert [r["chunk_id"] for r in out["results"]] == [r["chunk_id"] for r in plain["results"]][::-1]
    assert [r["scores"]["rerank"] for r in out["results"]] == pytest.approx([1.0, 2 / 3, 1 / 3])


@pytest.mark.torch
def test_cross_encoder_rerank_with_explain(db, tiny_cross_encoder):
    out = as_json(
        run(
            "table",
            "--db",
            db,
            "--json",
            "-k",
            "4",
            "--explain",
            "--rerank",
            f"cross-encoder:{tiny_cross_encoder}",
            "--rerank-candidates",
            "8",
        )
    )
    results = out["results"]
    assert len(results) == 4 and [r["rank"] for r in results] == [1, 2, 3, 4]
    scores = [r["scores"]["rerank"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0 <= x <= 1 for x in scores)
    assert all(r["explain"]["rerank"] == {"rank": r["rank"], "score": r["score"]} for r in results)
    assert all(r["fused"] is not None for r in results)  # the RRF score survives the rerank
    table = run("table", "--db", db, "-k", "2", "--explain", "--rerank", f"cross-encoder:{tiny_cross_encoder}")
    assert table.exit_code == 0 and "rerank" in table.stdout


def test_segments_over_llm_reranked_candidates(db):
    with FakeOpenAI() as server:
        server.chat_handler = lambda request: {"ranking": [1, 2, 3, 4, 5, 6]}
        env = {"QUARRY_LLM_BASE_URL": server.base_url, "QUARRY_LLM_API_KEY": "k"}
        out = as_json(
            run(
                "LayoutParser",
                "--db",
                db,
                "--json",
                "--segments",
                "--rerank",
                "llm",
                "--rerank-candidates",
                "6",
                env=env,
            )
        )
        assert server.calls == 1
    # rank-derived relevance after an LLM rerank: the top chunk is worth 1.0 - 0.18, a segment
    assert out["segments"] and out["segments"][0]["hits"][0] == 1
    assert all(set(s["hits"]) <= {1, 2, 3, 4, 5, 6} for s in out["segments"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--window", "x"], "--window takes BEFORE,AFTER"),
        (["--weights", "foo=1"], "--weights takes NAME=NUMBER"),
        (["--min-score", "vector=abc"], "--min-score takes NAME=NUMBER"),
        (["--since", "2024-13-40"], "since"),
        (["--where", "nonsense ==="], ""),
        (["--where", "no_such_column = 1"], "no_such_column"),
        (["--json", "--format", "table"], "disagree"),
        (["--window", "1,1", "--segments"], "alternatives"),
        (["--segments", "greedy"], "Invalid value for '--segments'"),
        (["--rerank", "bogus"], "unknown reranker"),
        (["--rerank", "cross-encoder:/no/such/model"], "no cross-encoder model"),
        (["--format", "xml"], "Invalid value for '--format'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(db, args, message):
    done = run("table", "--db", db, *args)
    assert done.exit_code == 2, done.output
    assert message in done.stderr and "Traceback" not in done.stderr
    if "Invalid value" not in message:  # click's own errors come with a usage line; ours are one line
        assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_acceptance_commands_in_a_subprocess(cli, db):
    done = cli("search", "table", "--db", db, "--where", "file_type = 'pdf'", "--json", "-k", "5")
    assert done.returncode == 0 and all(r["path"].endswith(".pdf") for r in json.loads(done.stdout)["results"])
    done = cli("search", "table", "--db", db, "--window", "1,1", "--json", "-k", "3")
    assert done.returncode == 0 and json.loads(done.stdout)["windows"]
    done = cli("search", "table", "--db", db, "--where", "bogus ~ 1")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1


def test_docs_describe_every_search_and_export_flag():
    from conftest import ROOT

    docs = {"search": (ROOT / "docs" / "query.md").read_text(), "export": (ROOT / "docs" / "export.md").read_text()}
    for name, text in docs.items():
        for param in cli_group.commands[name].params:
            for opt in param.opts:
                if opt.startswith("--") and opt not in ("--help", "--db", "--json"):
                    assert opt in text, f"docs for quarry {name} do not mention {opt}"
