import pytest

from quarry.search.fusion import FUSIONS, fuse, peak, rrf, tmm, tmm_weights, with_documents


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


def test_tmm_matches_hand_computed_scores():
    # vector: floor -1, best 0.8 -> a: 1, b: 1.5/1.8, c: 1.1/1.8 (the lowest, so missing = 1.1/1.8)
    # bm25: floor 0, best 10 -> b: 1, d: 0.5 (missing = 0.5); weights 0.8 / 0.2, no adaptation
    hits = {"vector": [("a", 0.8), ("b", 0.5), ("c", 0.1)], "bm25": [("b", 10.0), ("d", 5.0)]}
    fused = dict(tmm(hits, alpha=0.8, adapt=0.0))
    assert fused["a"] == pytest.approx(0.8 * 1 + 0.2 * 0.5)
    assert fused["b"] == pytest.approx(0.8 * 1.5 / 1.8 + 0.2 * 1)
    assert fused["c"] == pytest.approx(0.8 * 1.1 / 1.8 + 0.2 * 0.5)
    assert fused["d"] == pytest.approx(0.8 * 1.1 / 1.8 + 0.2 * 0.5)
    # c and d tie exactly: the best single rank (d is 2nd in bm25, c 3rd in vector) comes first
    assert [i for i, _ in tmm(hits, alpha=0.8, adapt=0.0)] == ["a", "b", "d", "c"]
    assert all(0.0 <= s <= 1.0 for s in fused.values())


@pytest.mark.parametrize("alpha, first", [(1.0, "a"), (0.0, "b")])
def test_tmm_alpha_one_or_zero_is_one_retriever(alpha, first):
    hits = {"vector": [("a", 0.9), ("b", 0.1)], "bm25": [("b", 3.0), ("a", 1.0)]}
    assert tmm(hits, alpha=alpha, adapt=0.0)[0][0] == first


def test_tmm_caller_weights_multiply_and_zero_skips():
    hits = {"vector": [("a", 0.9), ("b", 0.1)], "bm25": [("b", 3.0), ("a", 1.0)]}
    assert tmm_weights(hits, alpha=0.5, adapt=0.0) == {"vector": 0.5, "bm25": 0.5}
    assert tmm_weights(hits, {"vector": 3.0}, alpha=0.5, adapt=0.0) == {"vector": 0.75, "bm25": 0.25}
    assert tmm_weights(hits, {"vector": 0.0}, alpha=0.5, adapt=0.0) == {"vector": 0.0, "bm25": 1.0}
    assert tmm_weights({"vector": [], "bm25": [("x", 1.0)]}, alpha=0.9) == {"bm25": 1.0}


def test_peak_and_adaptation_move_weight_to_the_list_with_a_clear_head():
    flat = [(f"v{i}", 0.50 - 0.001 * i) for i in range(20)]  # an even slope: no candidate stands out
    headed = [("b0", 20.0), ("b1", 18.0), ("b2", 17.0)] + [(f"b{i}", 2.0) for i in range(3, 20)]
    assert peak([s for _, s in flat]) == pytest.approx((0.499 - 0.4905) / 0.019)
    assert peak([s for _, s in headed]) == pytest.approx((55 / 3 - (55 + 34) / 20) / 18)
    assert peak([1.0, 1.0, 1.0, 1.0]) == 0.0 and peak([2.0]) == 0.5
    fixed = tmm_weights({"vector": flat, "bm25": headed}, alpha=0.5, adapt=0.0)
    adapted = tmm_weights({"vector": flat, "bm25": headed}, alpha=0.5, adapt=1.0)
    assert fixed["bm25"] == 0.5 < adapted["bm25"] and sum(adapted.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("method", FUSIONS)
def test_fuse_dispatches_and_handles_empty_lists(method):
    assert fuse({"vector": [], "bm25": []}, method) == []
    assert [i for i, _ in fuse({"vector": [("a", 0.5)], "bm25": []}, method)] == ["a"]


def test_fuse_rrf_ignores_scores_and_unknown_method_fails():
    hits = {"vector": [("a", 0.9), ("b", 0.1)], "bm25": [("b", 30.0), ("a", 0.1)]}
    assert fuse(hits, "rrf", k=60) == rrf({"vector": ["a", "b"], "bm25": ["b", "a"]}, k=60)
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(hits, "combsum")


def test_tmm_a_short_list_means_the_rest_scored_nothing():
    # bm25 was asked for 3 and found 1: every other candidate has no query term (BM25 0 -> 0),
    # not the lowest listed score (which would hand "b" the exact match's full credit)
    hits = {"vector": [("b", 0.30), ("a", 0.29), ("c", 0.28)], "bm25": [("a", 4.0)]}
    assert tmm(hits, alpha=0.85, adapt=0.0, depth=3)[0][0] == "a"
    assert dict(tmm(hits, alpha=0.85, adapt=0.0, depth=3))["b"] == pytest.approx(0.85)
    assert dict(tmm(hits, alpha=0.85, adapt=0.0))["b"] == pytest.approx(1.0)  # depth unknown: lowest listed


def test_with_documents_adds_the_normalised_card_score_and_keeps_ties_in_fused_order():
    fused = [("a", 0.9), ("b", 0.85), ("c", 0.8), ("d", 0.8)]
    doc_of = {"a": 0, "b": 1, "c": 2, "d": -1}  # d: a chunk whose document has no card
    out = with_documents(fused, doc_of, [0.0, 4.0, 2.0], weight=0.1)
    assert out == [
        ("b", pytest.approx(0.95)),
        ("a", pytest.approx(0.9)),
        ("c", pytest.approx(0.85)),
        ("d", pytest.approx(0.8)),
    ]
    # nothing matches any card, or the weight is 0: the fused ranking unchanged
    assert with_documents(fused, doc_of, [0.0, 0.0, 0.0], weight=0.1) == fused
    assert with_documents(fused, doc_of, [0.0, 4.0, 2.0], weight=0.0) == fused
    tied = [("x", 0.5), ("y", 0.5)]
    assert [i for i, _ in with_documents(tied, {"x": 0, "y": 0}, [1.0], weight=0.1)] == ["x", "y"]
