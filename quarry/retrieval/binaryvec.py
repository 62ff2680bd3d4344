"""Binary (sign-bit) vectors: 32× smaller than float32, searched by Hamming distance.

Each float dimension becomes one bit (1 when the value is above a threshold, 0 by default), so
a 384-d MiniLM vector takes 48 bytes instead of 1,536. Hamming distance between bit vectors
approximates the angle between the float vectors; candidates from it are re-scored with exact
cosine on the float vectors, which can stay on disk (a ``np.memmap``): only
``k × rescore_multiplier`` rows are read per query.

    index = BinaryIndex(vectors)                    # float32 (n, d), any norms
    idx, scores = index.search(query, k=10)         # Hamming top 40, exact cosine top 10
    idx, scores = index.search(query, 10, rescore_multiplier=0)   # Hamming only

``bench/binary_vectors.py`` measures memory, latency and recall@10 against exact float search.
"""

from __future__ import annotations

import numpy as np

_BLOCK = 1 << 16  # rows per block: bounds the temporaries of a scan (rows × bytes per row)
_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
_HAS_BITWISE_COUNT = hasattr(np, "bitwise_count")  # numpy >= 2.0


def pack(vectors: np.ndarray, thresholds: np.ndarray | None = None) -> np.ndarray:
    """Bits of ``vectors > thresholds`` (0 by default), packed 8 to a byte: uint8 (n, ⌈d/8⌉).

    A 1-d vector gives a 1-d result. Trailing pad bits are 0 on every row, so they never add to
    a distance.
    """
    vectors = np.asarray(vectors)
    single = vectors.ndim == 1
    rows = vectors[None, :] if single else vectors
    cut = 0.0 if thresholds is None else np.asarray(thresholds, dtype=np.float32)
    out = np.empty((rows.shape[0], (rows.shape[1] + 7) // 8), dtype=np.uint8)
    for start in range(0, rows.shape[0], _BLOCK):  # block-wise: a memmap is never read whole
        out[start : start + _BLOCK] = np.packbits(np.asarray(rows[start : start + _BLOCK]) > cut, axis=1)
    return out[0] if single else out


def _units(packed: np.ndarray) -> np.ndarray:
    """``packed`` rows as uint64 words when a row is a multiple of 8 bytes (8× fewer ops), else bytes."""
    packed = np.ascontiguousarray(packed)
    if _HAS_BITWISE_COUNT and packed.shape[-1] % 8 == 0:
        return packed.view(np.uint64)
    return packed


def _to_columns(packed: np.ndarray) -> np.ndarray:
    """Unit-major layout (units, n): each unit's values for all rows are contiguous.

    A scan then runs one long XOR + popcount per unit over contiguous memory, 3-4× faster
    than reducing across the few units of each row.
    """
    return np.ascontiguousarray(_units(packed).T)


def _distances_columns(columns: np.ndarray, qunits: np.ndarray) -> np.ndarray:
    """Hamming distances (int32, one per row) of unit-major bits to the query's units."""
    n = columns.shape[1]
    out = np.empty(n, dtype=np.int32)
    block = min(_BLOCK, max(n, 1))
    xor = np.empty(block, dtype=columns.dtype)
    count = np.empty(block, dtype=np.uint8)
    acc = np.empty(block, dtype=np.uint16)  # narrow adds; cast once per block
    for start in range(0, n, block):
        stop = min(n, start + block)
        m = stop - start
        acc[:m] = 0
        for unit, qvalue in zip(columns, qunits):
            np.bitwise_xor(unit[start:stop], qvalue, out=xor[:m])
            if _HAS_BITWISE_COUNT:
                np.bitwise_count(xor[:m], out=count[:m])
            else:
                np.take(_POPCOUNT, xor[:m], out=count[:m])
            acc[:m] += count[:m]
        out[start:stop] = acc[:m]
    return out


def hamming_distances(packed: np.ndarray, qpacked: np.ndarray) -> np.ndarray:
    """Hamming distance from the packed query to every packed row: int32 (n,)."""
    qunits = _units(np.asarray(qpacked).reshape(1, -1))[0]
    return _distances_columns(_to_columns(packed), qunits)


def _smallest(values: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` smallest values, ordered by value then position (deterministic)."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if n < len(values):
        part = np.argpartition(values, n - 1)[:n]
    else:
        part = np.arange(len(values))
    return part[np.lexsort((part, values[part]))]


def hamming_topk(
    packed: np.ndarray, qpacked: np.ndarray, n: int, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` rows nearest to the query by Hamming distance: (row indices int64, distances int32).

    Sorted by distance, ties by row index. ``mask`` (bool, one per row) keeps only the rows
    where it is True; fewer than ``n`` rows come back when fewer are allowed. For repeated
    queries over the same rows, :class:`BinaryIndex` keeps the faster unit-major layout.
    """
    qunits = _units(np.asarray(qpacked).reshape(1, -1))[0]
    return _topk_columns(_to_columns(packed), qunits, n, mask)


def _topk_columns(
    columns: np.ndarray, qunits: np.ndarray, n: int, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    if mask is None:
        dist = _distances_columns(columns, qunits)
        top = _smallest(dist, n)
        return top.astype(np.int64), dist[top]
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (columns.shape[1],):
        raise ValueError(f"mask has shape {mask.shape}, expected ({columns.shape[1]},)")
    allowed = np.flatnonzero(mask)
    if len(allowed) * 4 < columns.shape[1]:  # selective filter: scan only the allowed rows
        dist = _distances_columns(np.ascontiguousarray(columns[:, allowed]), qunits)
        top = _smallest(dist, n)
        return allowed[top].astype(np.int64), dist[top]
    dist = _distances_columns(columns, qunits)
    dist[~mask] = np.iinfo(np.int32).max
    top = _smallest(dist, min(n, len(allowed)))
    return top.astype(np.int64), dist[top]


def exact_topk(
    vectors: np.ndarray, query: np.ndarray, k: int, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force cosine top ``k``: (row indices int64, cosine float32), best first.

    The reference that binary search is measured against; reads every row.
    """
    q = _unit(query)
    scores = np.empty(vectors.shape[0], dtype=np.float32)
    for start in range(0, vectors.shape[0], _BLOCK):
        block = np.asarray(vectors[start : start + _BLOCK], dtype=np.float32)
        scores[start : start + _BLOCK] = _cosines(block, q)
    if mask is not None:
        scores[~np.asarray(mask, dtype=bool)] = -np.inf
        k = min(k, int(np.count_nonzero(mask)))
    top = _smallest(-scores, k)
    return top.astype(np.int64), scores[top]


def _unit(query: np.ndarray) -> np.ndarray:
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(q))
    return q / norm if norm else q


def _cosines(rows: np.ndarray, q_unit: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1)
    norms[norms == 0] = 1.0
    cosines: np.ndarray = (rows @ q_unit) / norms
    return cosines


class BinaryIndex:
    """Hamming search over sign bits with exact cosine re-scoring on the float vectors.

    ``vectors`` (float32 (n, d), in memory or a ``np.memmap``) are kept by reference for
    re-scoring; the bits are computed once (``n·d/8`` bytes, see :attr:`nbytes`). With
    ``center=True`` each dimension is cut at its corpus mean instead of 0, which balances the
    bits of models whose dimensions are not centred (queries are cut at the same thresholds).
    """

    def __init__(self, vectors: np.ndarray, *, center: bool = False):
        if vectors.ndim != 2:
            raise ValueError(f"vectors must be 2-d (n, dim), got shape {vectors.shape}")
        self.vectors = vectors
        self.dim = vectors.shape[1]
        self.thresholds = _column_means(vectors) if center else None
        self._columns = _to_columns(pack(vectors, self.thresholds))  # the only copy of the bits

    def __len__(self) -> int:
        return int(self._columns.shape[1])

    @property
    def packed(self) -> np.ndarray:
        """The bits as :func:`pack` returns them, uint8 (n, ⌈dim/8⌉); a copy, for saving."""
        return np.ascontiguousarray(self._columns.T).view(np.uint8)

    @property
    def nbytes(self) -> int:
        """Bytes of the bit vectors (what must stay in memory)."""
        return int(self._columns.nbytes)

    def search(
        self, query: np.ndarray, k: int = 10, rescore_multiplier: int = 4, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` rows nearest to ``query``: (row indices int64, scores float32), best first.

        Hamming distance picks ``k × rescore_multiplier`` candidates, whose exact cosine with
        the query orders them; ``rescore_multiplier`` 0 (or 1) returns the Hamming order with
        score ``1 - 2·distance/dim`` (the fraction of agreeing bits, mapped to [-1, 1]).
        ``mask`` (bool, one per row) restricts the search to the rows where it is True.
        """
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"query has {q.shape[0]} dimensions, the index {self.dim}")
        qunits = _units(pack(q, self.thresholds)[None, :])[0]
        if rescore_multiplier <= 1:
            idx, dist = _topk_columns(self._columns, qunits, k, mask)
            return idx, (1.0 - 2.0 * dist / self.dim).astype(np.float32)
        cand, _ = _topk_columns(self._columns, qunits, k * rescore_multiplier, mask)
        cand = np.sort(cand)  # ascending rows: sequential reads from a memmap
        scores = _cosines(np.asarray(self.vectors[cand], dtype=np.float32), _unit(q))
        top = _smallest(-scores, min(k, len(cand)))
        return cand[top], scores[top]


def _column_means(vectors: np.ndarray) -> np.ndarray:
    total = np.zeros(vectors.shape[1], dtype=np.float64)
    for start in range(0, vectors.shape[0], _BLOCK):
        total += np.asarray(vectors[start : start + _BLOCK], dtype=np.float64).sum(axis=0)
    means: np.ndarray = (total / max(1, vectors.shape[0])).astype(np.float32)
    return means
