import pytest

from quarry.search.fusion import rrf


def test_rrf_matches_hand_computed_scores():
    # k = 60. a: 1/(60+1) + 1/(60+3); b: 1/(60+2) + 1/(60+1); c: 1/(60+3); d: 1/(60+2)
    fused = dict(rrf({"vector": ["a", "b", "c"], "bm25": ["b", "d", "a"]}, k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63)
    assert fused["d"] == pytest.approx(1 / 62)


def test_rrf_order_and_deterministic_ties():
    # x and y tie exactly (each rank 1 in one list); the tie breaks by id.
    assert [i for i, _ in rrf({"v": ["y", "z"], "b": ["x"]})] == ["x", "y", "z"]
    assert [i for i, _ in rrf({"v": ["a", "b"], "b": ["b", "a"]}, k=1)] == ["a", "b"]


def test_rrf_weights_and_k():
    fused = dict(rrf({"vector": ["a"], "bm25": ["b"]}, k=10, weights={"vector": 2.0, "bm25": 0.5}))
    assert fused == {"a": pytest.approx(2 / 11), "b": pytest.approx(0.5 / 11)}


def test_rrf_empty():
    assert rrf({"vector": [], "bm25": []}) == []
