"""Sign-bit vectors: packing, Hamming distance against a bit-by-bit reference, re-scored search."""

from __future__ import annotations

import numpy as np
import pytest

from quarry.retrieval import binaryvec
from quarry.retrieval.binaryvec import BinaryIndex, exact_topk, hamming_distances, hamming_topk, pack


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int, seed: int = 0, clusters: int = 40) -> np.ndarray:
    """Unit vectors around random centres, like embeddings of texts on a few topics."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    return unit(centres[rng.integers(0, clusters, n)] + 0.7 * rng.standard_normal((n, dim)))


def reference_hamming(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    return (np.unpackbits(a_bits, axis=1) != np.unpackbits(b_bits[None, :], axis=1)).sum(axis=1)


def test_pack_sets_one_bit_per_positive_value():
    v = np.array([[0.5, -1.0, 0.0, 2.0, -0.1, 0.3, 0.2, -0.2, 1.0]], dtype=np.float32)
    packed = pack(v)
    assert packed.dtype == np.uint8 and packed.shape == (1, 2)
    assert packed.tolist() == [[0b10010110, 0b10000000]]  # 9 dims: 7 pad bits, all 0
    assert pack(v[0]).tolist() == packed[0].tolist()  # a single vector packs to 1-d


def test_pack_with_thresholds():
    v = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]], dtype=np.float32)
    assert pack(v, thresholds=np.full(8, 4.5)).tolist() == [[0b00001111]]


@pytest.mark.parametrize("dim", [384, 20, 64, 1536])  # uint64 words and byte paths
@pytest.mark.parametrize("bitwise_count", [True, False])  # numpy >= 2 and the lookup table
def test_hamming_distances_match_bit_by_bit_reference(monkeypatch, dim, bitwise_count):
    if bitwise_count and not binaryvec._HAS_BITWISE_COUNT:
        pytest.skip("numpy < 2 has no bitwise_count")
    monkeypatch.setattr(binaryvec, "_HAS_BITWISE_COUNT", bitwise_count)
    rng = np.random.default_rng(dim)
    bits = pack(rng.standard_normal((300, dim)).astype(np.float32))
    q = pack(rng.standard_normal(dim).astype(np.float32))
    np.testing.assert_array_equal(hamming_distances(bits, q), reference_hamming(bits, q))


def test_hamming_distances_across_blocks(monkeypatch):
    monkeypatch.setattr(binaryvec, "_BLOCK", 7)  # several blocks and a ragged last one
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((50, 64)).astype(np.float32)
    bits = pack(vectors)
    d = hamming_distances(bits, bits[3])
    np.testing.assert_array_equal(d, reference_hamming(bits, bits[3]))
    assert d[3] == 0
    idx, _ = BinaryIndex(vectors).search(vectors[3], 5, rescore_multiplier=0)
    assert idx.tolist() == sorted(range(50), key=lambda i: (d[i], i))[:5]


def test_hamming_topk_is_sorted_with_ties_by_row():
    bits = np.array([[0b1111], [0b0000], [0b0001], [0b0011], [0b1000], [0b0000]], dtype=np.uint8)
    idx, dist = hamming_topk(bits, np.array([0], dtype=np.uint8), 4)
    assert idx.tolist() == [1, 5, 2, 4] and dist.tolist() == [0, 0, 1, 1]
    idx, dist = hamming_topk(bits, np.array([0], dtype=np.uint8), 10)  # more than there are
    assert idx.tolist() == [1, 5, 2, 4, 3, 0] and dist.tolist() == [0, 0, 1, 1, 2, 4]


@pytest.mark.parametrize("allowed", [[0, 3], [0, 2, 3, 4, 5, 7, 9, 11, 12, 13, 14, 15, 18]])
def test_hamming_topk_mask(allowed):  # selective (scans a subset) and broad (masks the full scan)
    rng = np.random.default_rng(7)
    bits = pack(rng.standard_normal((20, 16)).astype(np.float32))
    q = pack(rng.standard_normal(16).astype(np.float32))
    mask = np.zeros(20, dtype=bool)
    mask[allowed] = True
    idx, dist = hamming_topk(bits, q, 5, mask=mask)
    ref = reference_hamming(bits, q)
    expected = sorted(allowed, key=lambda i: (ref[i], i))[:5]
    assert idx.tolist() == expected and dist.tolist() == ref[expected].tolist()
    with pytest.raises(ValueError, match="mask has shape"):
        hamming_topk(bits, q, 5, mask=mask[:10])


def test_exact_topk_is_brute_force_cosine():
    vectors = clustered(500, 32) * np.random.default_rng(2).uniform(0.5, 2, (500, 1)).astype(np.float32)
    q = vectors[17] * 3
    idx, scores = exact_topk(vectors, q, 5)
    cos = (vectors @ q) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(q)
    assert idx.tolist() == np.argsort(-cos, kind="stable")[:5].tolist()
    np.testing.assert_allclose(scores, cos[idx], rtol=1e-5)
    assert idx[0] == 17 and scores[0] == pytest.approx(1.0, abs=1e-5)


def test_rescoring_every_row_equals_exact_search():
    vectors = clustered(400, 64)
    index = BinaryIndex(vectors)
    q = clustered(1, 64, seed=9)[0]
    idx, scores = index.search(q, 10, rescore_multiplier=40)  # 400 candidates = all rows
    e_idx, e_scores = exact_topk(vectors, q, 10)
    assert idx.tolist() == e_idx.tolist()
    np.testing.assert_allclose(scores, e_scores, rtol=1e-5)


def test_rescored_search_recalls_the_exact_neighbours():
    both = clustered(5050, 128)  # held-out queries from the same topics
    vectors, queries = both[:5000], both[5000:]
    index = BinaryIndex(vectors)
    recall = {m: [] for m in (0, 4, 10)}
    for q in queries:
        truth = set(exact_topk(vectors, q, 10)[0].tolist())
        for m in recall:
            recall[m].append(len(truth & set(index.search(q, 10, rescore_multiplier=m)[0].tolist())) / 10)
    means = {m: float(np.mean(r)) for m, r in recall.items()}
    assert means[0] < means[4] <= means[10]  # re-scoring is what makes it accurate
    assert means[10] >= 0.9


def test_hamming_only_scores_are_bit_agreement():
    vectors = clustered(100, 64)
    index = BinaryIndex(vectors)
    idx, scores = index.search(vectors[5], 3, rescore_multiplier=0)
    assert idx[0] == 5 and scores[0] == 1.0
    d = hamming_distances(index.packed, index.packed[5])
    np.testing.assert_allclose(scores, 1 - 2 * d[idx] / 64)


def test_search_with_mask_only_returns_allowed_rows():
    vectors = clustered(1000, 64)
    mask = np.zeros(1000, dtype=bool)
    mask[::7] = True
    index = BinaryIndex(vectors)
    idx, _ = index.search(vectors[14], 10, mask=mask)
    assert idx[0] == 14 and all(mask[i] for i in idx)
    e_idx, _ = exact_topk(vectors, vectors[14], 10, mask=mask)
    assert all(mask[i] for i in e_idx) and e_idx[0] == 14


def test_search_reads_float_vectors_from_a_memmap(tmp_path):
    vectors = clustered(2000, 48)
    np.save(tmp_path / "v.npy", vectors)
    on_disk = np.load(tmp_path / "v.npy", mmap_mode="r")
    in_memory, mapped = BinaryIndex(vectors), BinaryIndex(on_disk)
    assert mapped.nbytes == 2000 * 6 and in_memory.nbytes * 32 == vectors.nbytes
    np.testing.assert_array_equal(mapped.packed, pack(vectors))
    for q in clustered(5, 48, seed=4):
        a, sa = in_memory.search(q, 10)
        b, sb = mapped.search(q, 10)
        assert a.tolist() == b.tolist()
        np.testing.assert_allclose(sa, sb)


def test_centering_rescues_vectors_that_share_an_offset():
    # every dimension shifted the same way: sign bits at 0 are almost all 1 and say nothing
    both = clustered(3030, 64, seed=5) + 0.5
    vectors, queries = both[:3000], both[3000:]

    def recall(index):
        hits = [
            len(
                set(exact_topk(vectors, q, 10)[0].tolist()) & set(index.search(q, 10, rescore_multiplier=4)[0].tolist())
            )
            / 10
            for q in queries
        ]
        return float(np.mean(hits))

    assert recall(BinaryIndex(vectors, center=True)) > recall(BinaryIndex(vectors)) + 0.2


def test_wrong_shapes_are_refused():
    index = BinaryIndex(clustered(10, 16))
    with pytest.raises(ValueError, match="query has 8 dimensions, the index 16"):
        index.search(np.ones(8, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="must be 2-d"):
        BinaryIndex(np.ones(16, dtype=np.float32))
