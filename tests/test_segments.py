"""Relevant segment extraction: dsRAG's values and presets, the optimisation against a brute-force
reference, and segments built from a real DuckDB catalog."""

from __future__ import annotations

import math
import random

import pytest
from test_windows import TEXT, hit, make_index, tiled

from quarry.core.errors import UsageError
from quarry.search.segments import (
    PRESETS,
    best_segments,
    chunk_value,
    get_params,
    relevance,
    relevant_segments,
    segments_from_results,
)


def reference_best_segments(values, max_length, overall_max_length, minimum_value):
    """dsRAG's greedy search written as plainly as possible, over a concatenated meta-document."""
    meta, splits = [], []
    for vals in values:
        meta.extend(vals)
        splits.append(len(meta))
    doc_of = [next(d for d, end in enumerate(splits) if i < end) for i in range(len(meta))]
    chosen, total = [], 0
    while total < overall_max_length:
        best, best_value = None, -1000.0
        for start in range(len(meta)):
            if meta[start] < 0:
                continue
            for end in range(start + 1, min(start + max_length, len(meta)) + 1):
                if meta[end - 1] < 0 or doc_of[end - 1] != doc_of[start]:
                    continue
                if any(start < e and end > s for s, e in chosen):
                    continue
                if total + end - start > overall_max_length:
                    continue
                value = sum(meta[start:end])
                if value > best_value:
                    best, best_value = (start, end), value
        if best is None or best_value < minimum_value:
            break
        chosen.append(best)
        total += best[1] - best[0]
    out = []
    for s, e in chosen:
        d = doc_of[s]
        offset = splits[d - 1] if d else 0
        out.append((d, s - offset, e - offset, sum(meta[s:e])))
    return out


def test_presets_are_dsrags():
    # dsrag/rse.py RSE_PARAMS_PRESETS (overall_max_length_extension only matters for several queries)
    expected = {
        "balanced": (15, 30, 0.5, 0.18, 30, 10),
        "precision": (15, 30, 0.7, 0.2, 30, 10),
        "find_all": (40, 200, 0.4, 0.18, 200, 200),
    }
    for name, values in expected.items():
        p = PRESETS[name]
        assert (
            p.max_length,
            p.overall_max_length,
            p.minimum_value,
            p.irrelevant_chunk_penalty,
            p.decay_rate,
            p.top_k_for_document_selection,
        ) == values
        assert p.chunk_length_adjustment


def test_get_params_overrides_and_rejects():
    assert get_params("balanced", max_length=3).max_length == 3
    assert get_params("precision", relevance="rank").relevance == "rank"
    with pytest.raises(UsageError, match="unknown segment preset"):
        get_params("greedy")
    with pytest.raises(UsageError, match="unknown segment parameter"):
        get_params("balanced", max_len=3)
    with pytest.raises(UsageError, match="relevance"):
        get_params("balanced", relevance="fused")


@pytest.mark.parametrize("rank0, rel, expected", [(0, 1.0, 1.0 - 0.2), (30, 0.5, math.exp(-1) * 0.5 - 0.2)])
def test_chunk_value(rank0, rel, expected):
    assert chunk_value(rank0, rel, 0.2, 30) == pytest.approx(expected)


def test_best_segments_simple():
    p = -0.2
    values = [[p, 0.8, 0.7, p, 0.6, p, p, p, p, 0.3]]
    # 0.8 + 0.7 - 0.2 + 0.6 = 1.9 beats any shorter run; the lone 0.3 is below the minimum
    assert best_segments(values, 15, 30, 0.5) == [(0, 1, 5, pytest.approx(1.9))]
    # a 2-chunk limit splits it
    assert [seg[:3] for seg in best_segments(values, 2, 30, 0.5)] == [(0, 1, 3), (0, 4, 5)]
    # the overall budget stops after the first segment
    assert [seg[:3] for seg in best_segments(values, 15, 4, 0.5)] == [(0, 1, 5)]


def test_best_segments_never_cross_documents():
    values = [[-0.1, 0.5], [0.5, -0.1]]
    assert [seg[:3] for seg in best_segments(values, 10, 30, 0.4)] == [(0, 1, 2), (1, 0, 1)]


@pytest.mark.parametrize("seed", range(25))
def test_best_segments_matches_the_reference(seed):
    rng = random.Random(seed)
    values = []
    for _ in range(rng.randint(1, 4)):
        n = rng.randint(1, 25)
        values.append([rng.choice([-0.18, -0.18, rng.uniform(-0.3, 0.9)]) for _ in range(n)])
    max_length, overall, minimum = rng.randint(1, 10), rng.randint(1, 30), rng.uniform(0.0, 1.0)
    got = best_segments(values, max_length, overall, minimum)
    want = reference_best_segments(values, max_length, overall, minimum)
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert [g[3] for g in got] == pytest.approx([w[3] for w in want])


def scored(chunk_id, rank, vector=None, bm25=None, rerank=None, text="x" * 100):
    r = hit(chunk_id, rank)
    r.scores = {"vector": vector, "bm25": bm25}
    if rerank is not None:
        r.scores["rerank"] = rerank
    r.text = text
    return r


def test_relevance_modes():
    results = [
        scored("a:0", 1, vector=0.8, bm25=10.0),
        scored("a:1", 2, vector=-0.2, bm25=None),
        scored("a:2", 3, vector=None, bm25=5.0),
    ]
    assert relevance(results, "scores") == pytest.approx([(0.8 + 1.0) / 2, 0.0, 0.25])
    assert relevance(results, "rank") == [0.8, 0.8, 0.8]
    assert relevance(results, "auto") == relevance(results, "scores")
    with pytest.raises(UsageError, match="reranked"):
        relevance(results, "rerank")
    reranked = [scored("a:0", 1, rerank=0.9), scored("a:1", 2, rerank=1.5)]
    assert relevance(reranked, "auto") == [0.9, 1.0]
    # a single retriever's mode: its own normalised score, not halved
    bm25_only = [scored("a:0", 1, bm25=4.0), scored("a:1", 2, bm25=2.0)]
    assert relevance(bm25_only, "scores") == [1.0, 0.5]


def test_segments_from_a_real_catalog(tmp_path):
    idx = make_index(tmp_path, {"a": (TEXT, tiled(10)), "b": (TEXT, tiled(3))})
    results = [
        scored("a:5", 1, vector=0.9, bm25=9.0),
        scored("a:6", 2, vector=0.8, bm25=8.0),
        scored("a:8", 3, vector=0.85, bm25=7.0),
        scored("b:2", 4, vector=0.3, bm25=1.0),
    ]
    segments = segments_from_results(idx, results, get_params("balanced"))
    assert [(s.doc_id, s.first_chunk, s.last_chunk, s.hits) for s in segments] == [("a", 5, 8, [1, 2, 3])]
    seg = segments[0]
    assert seg.text == TEXT[300:540]
    assert (seg.start_char, seg.end_char) == (300, 540) and seg.chunk_ids == ["a:5", "a:6", "a:7", "a:8"]
    rels = relevance(results, "scores")
    values = [chunk_value(i, rels[i], 0.18, 30) for i in range(3)]
    assert seg.score == pytest.approx(sum(values) - 0.18)
    assert seg.rank == 1 and seg.path == "/r/a.md" and seg.title == "Title a" and seg.header == "Header a"
    # a laxer minimum also takes b's weak hit as a segment of its own
    loose = segments_from_results(idx, results, get_params("balanced", minimum_value=0.0))
    assert [(s.doc_id, s.first_chunk, s.last_chunk) for s in loose] == [("a", 5, 8), ("b", 2, 2)]


def test_document_selection_and_true_chunk_count(tmp_path):
    # n_chunks = 4 bounds the document even though chunk rows 4..9 exist
    idx = make_index(tmp_path, {"a": (TEXT, tiled(10)), "b": (TEXT, tiled(3))}, n_chunks={"a": 4})
    results = [
        scored("a:3", 1, vector=0.9, bm25=9.0),
        scored("b:0", 2, vector=0.9, bm25=9.0),
        scored("a:5", 3, vector=0.9, bm25=9.0),
    ]
    segs = segments_from_results(idx, results, get_params("balanced", top_k_for_document_selection=1))
    assert [(s.doc_id, s.first_chunk, s.last_chunk) for s in segs] == [("a", 3, 3)]


def test_chunk_length_adjustment_scales_long_chunks(tmp_path):
    idx = make_index(tmp_path, {"a": (TEXT, tiled(3))})
    short = [scored("a:1", 1, vector=0.9, bm25=1.0, text="x" * 100)]
    long = [scored("a:1", 1, vector=0.9, bm25=1.0, text="x" * 1400)]
    params = get_params("balanced")
    a = segments_from_results(idx, short, params)[0].score
    b = segments_from_results(idx, long, params)[0].score
    assert b == pytest.approx(2 * a)
    off = segments_from_results(idx, long, get_params("balanced", chunk_length_adjustment=False))[0].score
    assert off == pytest.approx(a)


def test_relevant_segments_over_given_results(tmp_path):
    idx = make_index(tmp_path, {"a": (TEXT, tiled(10))})
    results = [scored("a:2", 1, vector=0.9, bm25=3.0), scored("a:3", 2, vector=0.9, bm25=3.0)]
    segs = relevant_segments(idx, "query", "precision", results=results)
    assert [(s.first_chunk, s.last_chunk) for s in segs] == [(2, 3)]
    assert relevant_segments(idx, "query", results=[]) == []
