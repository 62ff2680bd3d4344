"""bench/model_variants.py: the BM25, ranking and fusion it scores variants with (no torch needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import bench_module

mv = bench_module("model_variants")

DOCS = [
    "Rollback of a release: revert the commit and watch the dashboards.",
    "The on-call rota changes every Monday.",
    "Dashboards show the release pipeline; a release rollback is rare.",
    "Lunch is at noon.",
]


def test_bm25_matches_the_okapi_formula_and_ranks_term_matches_first():
    bm25 = mv.BM25(DOCS, k1=0.9, b=0.4)
    scores = bm25.scores("release rollback")
    assert scores[1] == 0 and scores[3] == 0
    assert scores[0] > 0 and scores[2] > 0
    # document 0 by hand: both terms once; each is in two of the four documents
    n, df = 4, 2
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    length = len(mv.words(DOCS[0]))
    avg = sum(len(mv.words(d)) for d in DOCS) / n
    one = idf * 1 * 1.9 / (1 + 0.9 * (1 - 0.4 + 0.4 * length / avg))
    assert scores[0] == pytest.approx(2 * one)
    assert mv.BM25(DOCS).scores("absent words only").sum() == 0


def test_top_orders_by_score_and_stops_at_depth():
    scores = np.array([0.1, 0.9, 0.5, 0.7])
    assert mv.top(scores, depth=2) == [1, 3]
    assert mv.top(scores, depth=10) == [1, 3, 2, 0]


def test_fuse_is_reciprocal_rank_fusion():
    fused = mv.fuse([1, 2, 3], [3, 1, 4])
    # 1: 1/61 + 1/62; 3: 1/63 + 1/61; 2: 1/62; 4: 1/63
    assert fused == [1, 3, 2, 4]


def test_an_unknown_variant_is_refused_by_name():
    with pytest.raises(SystemExit, match="unknown variant 'q8'"):
        mv.encoder("q8", "/nowhere")
