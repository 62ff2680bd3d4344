"""The library does what ``quarry search`` does: Index.search composes candidate pools, rerank,
segments, truncation and windows in the CLI's order, on a real store; quarry.__all__ is the
public surface."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_query import DIM, FILLER, SETTINGS, commit, doc

import quarry
from quarry.core.errors import UsageError
from quarry.search.rerank import apply_order
from quarry.search.segments import get_params, segments_from_results
from quarry.search.windows import expand

QUERY = "rollback deploy release"


class Reverse:
    """A reranker that reverses its candidates and records how many it saw."""

    name = "reverse"

    def __init__(self):
        self.seen: list[int] = []

    def rerank(self, query, results):
        self.seen.append(len(results))
        n = len(results)
        return apply_order(results, list(range(n))[::-1], [(pos + 1) / n for pos in range(n)][::-1])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = tmp_path_factory.mktemp("api") / "store"
    records = [
        doc(
            f"runbook{i}",
            [
                f"{FILLER} part {j} of runbook {i}: rollback the deploy and release {j}."
                if j % 3 == 0
                else f"{FILLER} unrelated paragraph {j} of {i}."
                for j in range(12)
            ],
        )
        for i in range(6)
    ]
    commit(store, records)
    return store


@pytest.fixture
def idx(store):
    with quarry.open(store, SETTINGS) as index:
        yield index


def ids(results) -> list[str]:
    return [r.chunk_id for r in results]


def test_rerank_sees_the_pool_and_k_survive(idx):
    reranker = Reverse()
    response = idx.search(QUERY, k=3, rerank=reranker, rerank_candidates=8)
    plain = idx.search(QUERY, k=8)
    assert reranker.seen == [8]
    assert ids(response.results) == ids(plain.results)[::-1][:3]
    assert [r.rank for r in response.results] == [1, 2, 3]
    assert all(r.ranks["rerank"] == r.rank for r in response.results)
    assert response.segments is None and response.windows is None and "rerank" in response.timings


def test_rerank_then_segments_then_truncation_in_the_cli_order(idx):
    reranker = Reverse()
    response = idx.search(QUERY, k=2, rerank=reranker, rerank_candidates=10, segments="balanced")
    # by hand, as the CLI used to: pool of rerank_candidates, candidates max(pool, 50)
    pool = idx.search(QUERY, k=10, candidates=50).results
    reranked = Reverse().rerank(QUERY, pool)
    expected = segments_from_results(idx, reranked, get_params("balanced"))
    assert reranker.seen == [10]
    assert [s.to_dict() for s in response.segments] == [s.to_dict() for s in expected]
    assert ids(response.results) == ids(reranked[:2])


def test_segments_without_rerank_rank_the_presets_pool(idx):
    params = get_params("balanced", relevance="rank", results=40)
    response = idx.search(QUERY, k=3, segments=params)
    pool = idx.search(QUERY, k=40, candidates=50).results
    assert [s.to_dict() for s in response.segments] == [s.to_dict() for s in segments_from_results(idx, pool, params)]
    assert ids(response.results) == ids(pool[:3]) and response.segments


@pytest.mark.parametrize("window, before_after", [((1, 2), (1, 2)), (1, (1, 1)), ("0,1", (0, 1)), ([2, 0], (2, 0))])
def test_windows_widen_the_k_results(idx, window, before_after):
    response = idx.search(QUERY, k=4, window=window)
    assert len(response.results) == 4
    assert [w.to_dict() for w in response.windows] == [
        w.to_dict() for w in expand(idx, response.results, *before_after)
    ]
    out = response.to_dict()
    assert out["windows"] == [w.to_dict() for w in response.windows] and "segments" not in out


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"window": (1, 1), "segments": "balanced"}, "alternatives"),
        ({"window": (1,)}, "window takes"),
        ({"window": (-1, 1)}, "window takes"),
        ({"window": (1.5, 1)}, "window takes"),
        ({"window": True}, "window takes"),
        ({"window": "x"}, "--window takes BEFORE,AFTER"),
        ({"segments": "greedy"}, "unknown segment preset"),
        ({"segments": 3}, "segments takes a preset"),
        ({"rerank": "bogus"}, "unknown reranker 'bogus'"),
        ({"rerank": object()}, "rerank takes a spec"),
        ({"rerank": Reverse(), "rerank_candidates": 0}, "rerank_candidates must be at least 1"),
        ({"k": 0, "rerank": Reverse()}, "k must be at least 1"),
    ],
)
def test_bad_arguments_are_usage_errors(idx, kwargs, message):
    with pytest.raises(UsageError, match=message):
        idx.search(QUERY, **{"k": 3, **kwargs})


def test_plain_search_dict_has_no_stage_keys(idx):
    out = idx.search(QUERY, k=2).to_dict()
    assert "windows" not in out and "segments" not in out and len(out["results"]) == 2


def test_export_is_one_call(idx, tmp_path):
    report = idx.export(tmp_path / "out", "jsonl", filters="file_type = 'md'")
    assert report.rows == {"documents": 6, "sections": 6, "chunks": 72} and report.filter
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "chunks.jsonl",
        "documents.jsonl",
        "manifest.json",
        "sections.jsonl",
    ]


def test_public_surface():
    for name in quarry.__all__:
        assert getattr(quarry, name) is not None, name
    assert quarry.Index is quarry.search.query.Index
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        quarry.nope  # noqa: B018
    code = "import sys, quarry; print(sorted(m for m in ('numpy', 'duckdb', 'quarry.search') if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "QUARRY_EMBED_DIM": str(DIM)}
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_every_stage_reads_the_generation_the_search_started_on(tmp_path):
    """A commit while a search reranks is seen by the next search, not by this one's windows."""
    store = tmp_path / "store"
    commit(store, [doc("first", [f"{FILLER} rollback the deploy {j}." for j in range(4)])], run_id="r1")
    seen = {}

    class CommitsMeanwhile(Reverse):
        def rerank(self, query, results):
            commit(store, [doc("second", [f"{FILLER} rollback the release {j}." for j in range(4)])], run_id="r2")
            seen["during"] = index.snapshot.pointer.generation
            return super().rerank(query, results)

    with quarry.open(store, SETTINGS) as index:
        before = index.snapshot.pointer.generation
        response = index.search(QUERY, k=2, rerank=CommitsMeanwhile(), window=(1, 1))
        assert seen["during"] == before and response.windows
        assert {r.doc_id for r in response.results} == {response.windows[0].doc_id}
        assert index.snapshot.pointer.generation == before + 1  # the next call moves on
        assert len({r.doc_id for r in index.search(QUERY, k=8).results}) == 2
