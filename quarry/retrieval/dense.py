"""Vector search over a memory-mapped float32 matrix: exact, IVF, or binary with re-scoring.

The committed vectors are copied out of LanceDB once per generation into ``dense.vectors.npy``
(unit length, float32), which readers memory-map: no LanceDB import and no table scan on the
query path. Scores are cosine similarities.

- **exact**: one matrix-vector product over every row (or over the rows a filter keeps). Costs
  about ``rows × dim × 4`` bytes of memory bandwidth per query: ~150 MB, 8–20 ms, at 100K × 384.
- **IVF** (inverted file, "IVF-Flat"): at build time spherical k-means puts the rows into
  ``nlist ≈ 2 √rows`` clusters and the matrix is stored cluster by cluster; a query scores the
  centroids and then only the rows of the ``nprobe`` nearest clusters, contiguous slices of the
  memory map (:data:`MIN_PROBES` of them, or :data:`PROBE_SHARE` of them when that is more). Built when a
  store has at least :data:`IVF_MIN_ROWS` chunks; below that, exact search is fast enough.
  Finer lists read fewer rows for the same recall: at 1M rows, ``√rows`` lists probed 1/8
  deep read 125,000 rows a query (31 ms); see docs/search-index.md for the measured choice and
  why not HNSW (build time at commit on two cores).
- **binary**: sign bits of every row (:mod:`quarry.retrieval.binaryvec`, 48 bytes a row at 384-d), Hamming
  top ``20 n``, re-scored exactly (recall@10 0.978 on MiniLM). The bits are computed from the
  memory map on first use (about a second per million rows).

A filter arrives as a boolean mask over rows, applied before the top ``n`` are taken. Exact
search scores only the rows it keeps. IVF skips clusters without kept rows and probes the
others, nearest first, until it has seen the same share of the kept rows that it sees of all
rows without a filter, and 1.5 times as many rows as an unfiltered search reads (the k nearest
kept rows lie further out than the k nearest rows); it scores whole clusters (contiguous slices)
and drops the rows the filter excludes. When a filter keeps fewer rows than half of what IVF
would read, ``auto`` searches exactly over those rows instead.
Recall@10 against exact search (bench/ann_recall.py --rows, real MiniLM vectors and mixtures of
them): 0.95-0.97 at 100K rows (632 lists, 32-51 probes) with or without a random 20% filter; a
filter keeping only rows far from every query is the hard case for any IVF index (0.87 on the
old 1/8 rule at 25K rows; ``vector_search="exact"`` is exact). docs/search-index.md has the table.

Files: ``dense.vectors.npy`` (float32, rows in storage order), and with IVF
``dense.slot_rows.npy`` (int32: storage position -> row id), ``ivf.centroids.npy`` (float32,
nlist × dim) and ``ivf.offsets.npy`` (int64, nlist + 1: cluster c holds positions
``offsets[c]:offsets[c + 1]``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quarry.retrieval.select import top_n

if TYPE_CHECKING:
    from quarry.retrieval.binaryvec import BinaryIndex

IVF_MIN_ROWS = 20_000  # below this, exact search reads under 30 MB per query and IVF is not built
NLIST_FACTOR = 2.0  # nlist = NLIST_FACTOR * sqrt(rows): k-means cost grows with it (bench/ann_recall.py --rows)
# Clusters probed: recall depends on the count far more than on the share of nlist (on real
# MiniLM vectors at 100K rows, ~30 probes give 0.95 whether nlist is 316, 632 or 1,264), so a
# floor of MIN_PROBES and a slow share on top (bench/ann_recall.py --rows).
PROBE_SHARE = 1 / 64
MIN_PROBES = 48
FILTER_WORK = 1.5  # a filtered IVF search reads 1.5x the rows: its top k lie further out (recall, bench)
METHODS = ("auto", "exact", "ivf", "binary")
_BLOCK = 1 << 13  # rows assigned at a time: the block x nlist score matrix stays at 64 MB at 2,000 lists
_MATVEC_ROWS = 1024
# An unfiltered IVF search probing at most this many rows gathers them in one product rather than
# looping over clusters (nprobe tiny clusters cost a Python iteration each; big ones read in place).
_GATHER_ROWS = 4 * _MATVEC_ROWS


def normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows L2-normalised as float32, all-zero rows left as they are (the one definition: the
    embedders and the index builder both use it)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = matrix / norms
    return unit


def normalise_inplace(matrix: np.ndarray) -> np.ndarray:
    """Scale the float32 rows of ``matrix`` to unit length in place (zero rows stay zero), in
    blocks, so that no full-size temporary is made."""
    for start in range(0, matrix.shape[0], _BLOCK):
        block = matrix[start : start + _BLOCK]
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        block /= norms
    return matrix


def matvec(matrix: np.ndarray, q: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """``matrix @ q`` (or ``matrix[rows] @ q``) in blocks of :data:`_MATVEC_ROWS` rows.

    Small blocks keep OpenBLAS on one thread: a matrix-vector product is bound by memory, not
    arithmetic, and on a busy machine its threads wait on each other. Measured on 2 loaded
    cores, 10,000 × 384: 0.9 ms in blocks of 1,024 rows, 2–40 ms in one call or larger blocks.
    """
    total = matrix.shape[0] if rows is None else len(rows)
    out = np.empty(total, dtype=np.float32)
    for start in range(0, total, _MATVEC_ROWS):
        part = matrix[start : start + _MATVEC_ROWS] if rows is None else matrix[rows[start : start + _MATVEC_ROWS]]
        np.matmul(part, q, out=out[start : start + _MATVEC_ROWS])
    return out


def default_nlist(n_rows: int) -> int:
    return max(8, int(round(NLIST_FACTOR * math.sqrt(n_rows))))


def build(
    vectors: np.ndarray,
    ivf_min_rows: int = IVF_MIN_ROWS,
    nlist: int | None = None,
    seed: int = 0,
    inplace: bool = False,
    centroids: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Files for unit-length ``vectors`` in row order; IVF when there are ``ivf_min_rows`` or more.

    ``inplace``: IVF reorders the rows of ``vectors`` itself into storage order (the caller's
    matrix becomes ``dense.vectors.npy``) instead of copying them, one matrix less at commit.
    ``centroids``: a base segment's IVF centroids, for a segment too small for its own IVF: its
    rows are stored by their nearest base centroid (``dense.slot_rows.npy`` and
    ``ivf.offsets.npy``, no centroids file), so a reader probes them with the base's clusters
    (:meth:`DenseIndex.share_centroids`) instead of scanning them all. Costs ``rows × nlist``
    dot products: what the segment holds, not the store.
    """
    t0 = time.perf_counter()
    n = vectors.shape[0]
    info: dict[str, Any] = {"rows": n, "dim": int(vectors.shape[1]) if vectors.ndim == 2 else 0, "ivf": None}
    if n < max(1, ivf_min_rows):
        files = {"dense.vectors.npy": np.ascontiguousarray(vectors, dtype=np.float32)}
        if centroids is not None and n and vectors.ndim == 2 and centroids.shape[1:] == vectors.shape[1:]:
            files.update(
                _layout(
                    files["dense.vectors.npy"], _assign(files["dense.vectors.npy"], centroids), len(centroids), inplace
                )
            )
            info["base_ivf"] = {"nlist": len(centroids)}
        info["seconds"] = round(time.perf_counter() - t0, 3)
        return files, info
    nlist = min(nlist or default_nlist(n), n)
    centroids, assign = kmeans(vectors, nlist, seed=seed)
    files = _layout(vectors, assign, nlist, inplace)
    offsets = files["ivf.offsets.npy"]
    info["ivf"] = {"nlist": nlist, "largest": int(np.diff(offsets).max()), "empty": int((np.diff(offsets) == 0).sum())}
    info["seconds"] = round(time.perf_counter() - t0, 3)
    return {**files, "ivf.centroids.npy": centroids}, info


def _layout(vectors: np.ndarray, assign: np.ndarray, nlist: int, inplace: bool) -> dict[str, np.ndarray]:
    """The rows stored cluster by cluster: vectors in storage order, storage position -> row, and
    the clusters' bounds."""
    order = np.argsort(assign, kind="stable").astype(np.int32)
    offsets = np.zeros(nlist + 1, dtype=np.int64)
    np.cumsum(np.bincount(assign, minlength=nlist), out=offsets[1:])
    stored = permute_rows(vectors, order) if inplace else np.ascontiguousarray(vectors[order], dtype=np.float32)
    return {"dense.vectors.npy": stored, "dense.slot_rows.npy": order, "ivf.offsets.npy": offsets}


def permute_rows(matrix: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Reorder the rows of ``matrix`` in place so that row ``i`` becomes the old row ``order[i]``
    (``matrix[order]`` without a second matrix), following the permutation's cycles with one
    row of scratch: about a microsecond a row, 1.5 GB less than a copy at 1M × 384."""
    done = np.zeros(len(order), dtype=bool)
    done[order == np.arange(len(order))] = True
    scratch = np.empty(matrix.shape[1:], dtype=matrix.dtype)
    for start in np.flatnonzero(~done).tolist():
        if done[start]:
            continue
        scratch[...] = matrix[start]
        i = start
        nxt = int(order[i])
        while nxt != start:
            matrix[i] = matrix[nxt]
            done[i] = True
            i, nxt = nxt, int(order[nxt])
        matrix[i] = scratch
        done[i] = True
    return matrix


def _assign(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    out = np.empty(vectors.shape[0], dtype=np.int64)
    for start in range(0, vectors.shape[0], _BLOCK):
        out[start : start + _BLOCK] = np.argmax(vectors[start : start + _BLOCK] @ centroids.T, axis=1)
    return out


def kmeans(
    vectors: np.ndarray, k: int, iters: int = 10, sample_per_list: int = 32, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Spherical k-means: unit centroids (k × dim) trained on a sample, and every row's cluster."""
    rng = np.random.default_rng(seed)
    n = vectors.shape[0]
    take = np.sort(rng.choice(n, size=min(n, k * sample_per_list), replace=False))
    sample = np.asarray(vectors[take], dtype=np.float32)
    centroids = sample[rng.choice(len(sample), size=k, replace=False)].copy()
    for _ in range(iters):
        assign = _assign(sample, centroids)
        sums = np.zeros_like(centroids)
        np.add.at(sums, assign, sample) if len(sample) < 4096 else _scatter_sum(sums, assign, sample)
        counts = np.bincount(assign, minlength=k)
        empty = counts == 0
        if empty.any():  # restart an empty cluster at a random sample point
            sums[empty] = sample[rng.choice(len(sample), size=int(empty.sum()), replace=False)]
        centroids = normalise(sums)
    return centroids, _assign(vectors, centroids)


def _scatter_sum(sums: np.ndarray, assign: np.ndarray, rows: np.ndarray) -> None:
    order = np.argsort(assign, kind="stable")
    groups, starts = np.unique(assign[order], return_index=True)
    sums[groups] = np.add.reduceat(rows[order], starts, axis=0)


class DenseIndex:
    """A loaded vector index. ``search`` returns row ids and cosine scores, best first."""

    def __init__(self, arrays: dict[str, np.ndarray], probe_share: float = PROBE_SHARE, min_probes: int = MIN_PROBES):
        self.vectors = arrays["dense.vectors.npy"]
        self.slot_rows = arrays.get("dense.slot_rows.npy")
        self.centroids = arrays.get("ivf.centroids.npy")
        self.offsets = arrays.get("ivf.offsets.npy")
        self.n_rows: int = self.vectors.shape[0]
        self.dim: int = self.vectors.shape[1] if self.vectors.ndim == 2 else 0
        self.probe_share = probe_share
        self.min_probes = min_probes
        self._binary: BinaryIndex | None = None
        self._masks: list[
            tuple[np.ndarray, np.ndarray, np.ndarray | None]
        ] = []  # (mask, in storage order, per cluster)
        self._dead: tuple[np.ndarray, np.ndarray] | None = None  # (dead rows, as a mask in storage order)
        self._slots: np.ndarray | None = None  # row -> storage slot, built on first use by cosines

    @classmethod
    def load(cls, folder: Path, **kwargs: Any) -> DenseIndex:
        arrays = {
            p.name: np.load(p, mmap_mode="r") for p in folder.glob("*.npy") if p.name.startswith(("dense.", "ivf."))
        }
        return cls(arrays, **kwargs)

    @property
    def has_ivf(self) -> bool:
        return self.centroids is not None

    def share_centroids(self, centroids: np.ndarray) -> None:
        """Probe this segment with a base segment's clusters (its rows were stored by them at
        commit: :func:`build` with ``centroids``)."""
        if self.offsets is None or self.slot_rows is None or len(self.offsets) != len(centroids) + 1:
            raise ValueError(f"a segment of {self.n_rows} rows is not laid out by {len(centroids)} clusters")
        self.centroids = centroids

    def nprobe(self) -> int:
        """Clusters an IVF search scores at least."""
        assert self.centroids is not None  # asked of an IVF index only
        return min(len(self.centroids), max(self.min_probes, math.ceil(len(self.centroids) * self.probe_share)))

    def _scanned(self) -> int:
        """About the rows an unfiltered IVF search reads."""
        assert self.centroids is not None  # asked of an IVF index only
        return math.ceil(self.n_rows * self.nprobe() / max(1, len(self.centroids)))

    def _rows(self, slots: np.ndarray) -> np.ndarray:
        return slots if self.slot_rows is None else self.slot_rows[slots].astype(np.int64)

    def _slot_mask(self, mask: np.ndarray | None) -> np.ndarray | None:
        if mask is None:
            return None
        if self.slot_rows is None:
            return mask
        return self._per_mask(mask)[0]

    def _per_mask(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The mask in storage order and its kept rows per cluster, for the last few masks.

        Both cost a pass over every row (a few ms at 1M); the query module caches masks per
        filter, so the same array comes back query after query. The cache holds the mask itself,
        so an ``id`` is never reused while it is cached.
        """
        for held, smask, per_cluster in self._masks:
            if held is mask:
                return smask, per_cluster
        assert self.slot_rows is not None  # asked of an index stored by cluster
        smask = mask[self.slot_rows]
        per_cluster = None
        if self.has_ivf:
            offsets = self.offsets
            assert offsets is not None  # an IVF index
            counts = np.concatenate(([0], np.cumsum(smask, dtype=np.int64)))
            per_cluster = counts[offsets[1:]] - counts[offsets[:-1]]
        self._masks = [(mask, smask, per_cluster)] + self._masks[:3]
        return smask, per_cluster

    def _dead_slots(self, dead: np.ndarray) -> np.ndarray:
        """A bool per storage position, True at the rows ``dead`` (cached for the array given)."""
        if self._dead is None or self._dead[0] is not dead:
            mask = np.zeros(self.n_rows, dtype=bool)
            mask[dead] = True
            self._dead = (dead, mask if self.slot_rows is None else mask[self.slot_rows])
        return self._dead[1]

    def cosines(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The cosine of ``query`` with each of ``rows`` (row ids, float32 in their order): the
        score :meth:`search` gives a row, for rows it did not return."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        q = q / norm if norm else q
        rows = np.asarray(rows, dtype=np.int64)
        if self.slot_rows is not None:  # IVF stores rows by cluster: find each row's slot
            if self._slots is None:
                slots = np.empty(self.n_rows, dtype=np.int64)
                slots[np.asarray(self.slot_rows, dtype=np.int64)] = np.arange(self.n_rows, dtype=np.int64)
                self._slots = slots
            rows = self._slots[rows]
        cosines: np.ndarray = matvec(self.vectors, q, rows) if len(rows) else np.zeros(0, dtype=np.float32)
        return cosines

    def search(
        self,
        query: np.ndarray,
        n: int,
        mask: np.ndarray | None = None,
        method: str = "auto",
        kept: int | None = None,
        rescore_multiplier: int = 20,
        dead: np.ndarray | None = None,
        probes: dict[int, list[int]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``n`` rows by cosine: (rows int64, scores float32), ties by row id.

        ``mask`` (bool per row) restricts the search to rows where it is True; ``kept`` is its
        count when the caller knows it. ``dead`` (row ids, without a mask): rows left out (deleted
        by later segments), as if absent. ``probes``: a dict kept for one query across segments
        that share centroids, so the clusters are ranked once.
        """
        if self.n_rows == 0 or n <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        q = q / norm if norm else q
        if q.shape[0] != self.dim:
            raise ValueError(f"the query vector has {q.shape[0]} dimensions, the index {self.dim}")
        smask = self._slot_mask(mask)
        if mask is not None:
            kept = int(np.count_nonzero(mask)) if kept is None else kept
            if kept == 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if method == "binary":
            return self._binary_search(q, n, smask, rescore_multiplier)
        if method == "ivf" and not self.has_ivf:
            method = "exact"
        if method == "auto":
            # With a filter, exact search gathers the kept rows, scattered over the matrix; IVF
            # reads about the rows of nprobe clusters, contiguously, several times faster per
            # row. Exact only when it gathers fewer rows than half of what IVF would read.
            method = (
                "ivf"
                if self.has_ivf and (mask is None or (kept is not None and kept > self._scanned() / 2))
                else "exact"
            )
        dead_slots = self._dead_slots(dead) if dead is not None and len(dead) and mask is None else None
        if method == "exact":
            return self._exact(q, n, smask, kept, dead_slots)
        return self._ivf(q, n, smask, mask, dead_slots, probes)

    def _exact(
        self,
        q: np.ndarray,
        n: int,
        smask: np.ndarray | None,
        kept: int | None = None,
        dead_slots: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        if smask is not None and kept is not None and kept * 4 < self.n_rows:
            slots = np.flatnonzero(smask)  # few rows: gather them
            scores = matvec(self.vectors, q, slots)
        else:  # all rows, contiguously; a filter then drops what it excludes
            scores = matvec(self.vectors, q)
            slots = None
            if smask is not None:
                slots = np.flatnonzero(smask)
                scores = scores[slots]
            elif dead_slots is not None:
                slots = np.flatnonzero(~dead_slots)
                scores = scores[slots]
        rows = self._rows(np.arange(self.n_rows) if slots is None else slots)
        pos = top_n(scores, n, rows)
        return rows[pos], scores[pos]

    def _ivf(
        self,
        q: np.ndarray,
        n: int,
        smask: np.ndarray | None,
        mask: np.ndarray | None = None,
        dead_slots: np.ndarray | None = None,
        probes: dict[int, list[int]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Score the clusters nearest to ``q``: ``nprobe`` of them without a filter; with one,
        clusters holding kept rows, nearest first, until they held ``probe_share`` of the kept
        rows (and at least ``n``) and ``FILTER_WORK`` times the rows an unfiltered search reads,
        so a filter that keeps nothing near the query still reaches its nearest kept rows."""
        centroids, offsets = self.centroids, self.offsets
        assert centroids is not None and offsets is not None  # an IVF index
        order = probes.get(id(centroids)) if probes is not None else None
        if order is None:
            order = np.argsort(-matvec(centroids, q), kind="stable").tolist()
            if probes is not None:
                probes[id(centroids)] = order
        per_cluster: np.ndarray | None
        if smask is None:
            order, per_cluster, target, work = order[: self.nprobe()], None, 0, 0
        else:
            assert mask is not None  # smask is the mask in storage order
            per_cluster = self._per_mask(mask)[1]
            assert per_cluster is not None  # an IVF index counts kept rows per cluster
            target = max(n, math.ceil(int(per_cluster.sum()) * self.nprobe() / len(centroids)))
            work = math.ceil(self._scanned() * FILTER_WORK)
        parts_s: list[np.ndarray] = []
        parts_i: list[np.ndarray] = []
        found, scanned = 0, 0
        if per_cluster is None:
            probe = np.asarray(order, dtype=np.int64)
            starts = offsets[probe]
            sizes = offsets[probe + 1] - starts
            total = int(sizes.sum())
            if total <= _GATHER_ROWS:  # small clusters (a small segment's, most at 100K): one gather, not a loop
                slots = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(total)
                parts_s, parts_i, found, order = [matvec(self.vectors, q, slots)], [slots], total, []
        for c in order:
            if per_cluster is not None:
                if found >= target and scanned >= work:
                    break
                if not per_cluster[c]:
                    continue
            a, b = int(offsets[c]), int(offsets[c + 1])
            if a == b:
                continue
            scores = matvec(self.vectors[a:b], q)  # a contiguous slice: no gather, whatever the filter
            if smask is None:
                slots = np.arange(a, b)
            else:
                keep = smask[a:b]
                slots, scores = a + np.flatnonzero(keep), scores[keep]
            parts_s.append(scores)
            parts_i.append(slots)
            found += len(slots)
            scanned += b - a
        if not found:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = np.concatenate(parts_s)
        slots = np.concatenate(parts_i)
        if dead_slots is not None:  # rows later segments deleted
            keep = ~dead_slots[slots]
            scores, slots = scores[keep], slots[keep]
        rows = self._rows(slots)
        pos = top_n(scores, n, rows)
        return rows[pos], scores[pos]

    def _binary_search(
        self, q: np.ndarray, n: int, smask: np.ndarray | None, rescore_multiplier: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if self._binary is None:
            from quarry.retrieval.binaryvec import BinaryIndex

            self._binary = BinaryIndex(self.vectors)
        slots, scores = self._binary.search(q, n, rescore_multiplier=rescore_multiplier, mask=smask)
        return self._rows(slots), scores.astype(np.float32)
