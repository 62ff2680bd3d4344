"""A generation's search index as several immutable segments plus the rows they no longer hold.

Each commit writes one segment (``index-<gen>/``) for the rows its catalog layer holds — the
chunks and documents the run added or changed, or, when it merges, the live rows of the layers it
merges (quarry/store/layers.py) — and a list of the rows of earlier segments it replaced or deleted.
A reader numbers rows segment after segment (oldest first), so a row id is a segment's offset plus
the row's place in that segment (chunk_id order), and searches every segment with the deleted rows
left out. Segments are never rewritten; they go when no kept generation names them.

**BM25 over segments, exactly.** A segment's stored weights were computed with the statistics of
the segment alone (its N, df and avgdl). The store's BM25 is defined over all live rows, so the
weights are scaled, per query term and segment, by ``idf_live(t) / idf_segment(t)`` (exact) and
bounded for the length normalisation: with ``a = avgdl_live / avgdl_segment``,

    tf·(k1+1) / (tf + k1·(1 − b + b·len/avgdl_live))  ÷  tf·(k1+1) / (tf + k1·(1 − b + b·len/avgdl_segment))

lies between ``min(1, a)`` and ``max(1, a)`` for every row. Scaled sums are therefore lower and
upper bounds of each row's exact score (widened by a few float32 roundings). The rows whose upper
bound reaches the ``n``-th best lower bound are rescored exactly — every weight recomputed from
the segment's stored term frequencies and row lengths with the live N, df and avgdl, by the same
float64 expression and float32 sums, term by term in the same order, as a build over all live rows
— so the top ``n`` rows and their scores are those of a full rebuild (``tests/test_segments.py``
checks them bit for bit against one). ``df_live`` is each segment's document frequency minus the
deleted rows in the term's column: counted by the commits that deleted them (``deleted.terms.npy``,
:func:`quarry.retrieval.bm25.row_columns`), so a query looks each term up; or, for a segment no
commit counted (an index from an older quarry), counted in the column at the first query that
asks (a binary search of the sorted deleted rows). A store of one segment without deletions needs
no rescoring: its stored weights are exact.

**Vectors.** Each segment has its own vectors (with IVF once it has ``IVF_MIN_ROWS`` rows; a
smaller one laid out by the base segment's clusters when the base has IVF, and probed with them,
the clusters ranked once a query; else searched exactly); a query takes each segment's top ``n``
and keeps the best ``n`` overall.
Deleted rows are left out of the scores a segment computes (they never compete for its top
``n``; a bool per row, so as cheap for many deleted rows as for few), or, with a filter or the
``binary`` method past :data:`DELETED_SKIP` deleted rows, through the filter mask.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from quarry.retrieval.bm25 import BM25Index, _idf, _length_norm, _normed_weights, stem_words
from quarry.retrieval.select import top_n

if TYPE_CHECKING:
    from quarry.retrieval.dense import DenseIndex

K = TypeVar("K")
V = TypeVar("V")
Terms = list[list[int | None]]  # per query term, its column in each segment (None: the segment lacks it)

DELETED_SKIP = 4096  # binary search: a segment with more deleted rows is searched with a mask of its live rows
_SLACK = 2.0**-24  # float32's unit roundoff: the rounding of a stored weight, a scaling, a sum
_WORDS_KEPT = 65_536  # words, stems and terms a reader keeps looked up


def split_rows(rows: np.ndarray, offsets: np.ndarray, dtype: npt.DTypeLike = np.int64) -> list[np.ndarray]:
    """Sorted global row ids cut into each segment's local ids (``dtype``: that of the segments'
    postings, so a binary search against a posting list never converts the list)."""
    cuts = np.searchsorted(rows, offsets)
    return [(rows[cuts[i] : cuts[i + 1]] - offsets[i]).astype(dtype, copy=False) for i in range(len(offsets) - 1)]


def _local_dtype(parts: list[BM25Index]) -> np.dtype:
    """The dtype of the segments' posting rows when they share one (int32 as built), else int64."""
    types = {p.rows.dtype for p in parts}
    return types.pop() if len(types) == 1 else np.dtype(np.int64)


class _Unseen(Enum):
    UNSEEN = 0  # a word no query looked up yet (None is a lookup's answer)


_UNSEEN = _Unseen.UNSEEN


def _remember(cache: dict[K, V], key: K, value: V, size: int) -> V:
    """Keep ``value`` under ``key`` in a reader's cache of at most ``size`` entries (oldest out),
    safe while other threads of a server use the same reader: a key another thread took out
    first is no error. Returns ``value``."""
    if len(cache) >= size:
        try:
            cache.pop(next(iter(cache)), None)
        except (StopIteration, RuntimeError):  # emptied, or changed while read: the next call retries
            pass
    cache[key] = value
    return value


def count_in(column_rows: np.ndarray, sorted_ids: np.ndarray) -> int:
    """How many of ``sorted_ids`` are in ``column_rows`` (ascending, distinct)."""
    if not len(sorted_ids) or not len(column_rows):
        return 0
    pos = np.searchsorted(column_rows, sorted_ids)
    inside = pos < len(column_rows)
    return int(np.count_nonzero(column_rows[pos[inside]] == sorted_ids[inside]))


class SegmentedBM25:
    """BM25 over the live rows of several segments' :class:`BM25Index` (see the module docstring).

    ``deleted``: sorted global row ids no longer live; ``live_rows`` and ``live_length`` the count
    and summed ``len(d)`` of the live rows (kept by the commit, so no reader sums them);
    ``dead_terms``: per segment, ``(columns, rows)`` — the columns its deleted rows hold
    (ascending) and how many deleted rows hold each — or None where no commit counted them.
    """

    def __init__(
        self,
        parts: list[BM25Index],
        deleted: np.ndarray,
        live_rows: int,
        live_length: int,
        dead_terms: list[tuple[np.ndarray, np.ndarray] | None] | None = None,
    ):
        self.parts = parts
        self.offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([p.n_rows for p in parts], out=self.offsets[1:])
        self.n_rows = int(self.offsets[-1])
        self.deleted = np.asarray(deleted, dtype=np.int64)
        self.local_dtype = _local_dtype(parts)
        self.seg_deleted = split_rows(self.deleted, self.offsets, self.local_dtype)
        self.dead_terms = list(dead_terms) if dead_terms is not None else [None] * len(parts)
        self.live_rows = int(live_rows)
        self.avgdl = float(live_length) / self.live_rows if self.live_rows else 0.0
        # Stored weights are exact when one segment holds every live row with the statistics it was
        # built with: then nothing is rescored (the merged store's speed).
        self.exact = (
            len(parts) == 1
            and not len(self.deleted)
            and parts[0].n_rows == self.live_rows
            and parts[0].length_total == live_length
        )
        self._deleted_masks: dict[int, np.ndarray] = {}
        self._terms: dict[tuple[str, ...], Terms] = {}
        # per word, shared by every query that holds it (queries share their words): a token's
        # stem as the segments' surface forms give it (None: no segment holds the token), a
        # stem's column in each segment, and a term's live df over all segments
        self._surface_stems: dict[str, str | None] = {}
        self._stem_cols: dict[str, list[int | None]] = {}
        self._term_df: dict[tuple[int | None, ...], int] = {}
        self._idf: dict[tuple[tuple[int | None, ...], ...], np.ndarray] = {}
        self._df: dict[tuple[int, int], int] = {}  # (segment, column) -> live df: at most the vocabulary
        self._built: dict[tuple[int, int], float] = {}  # (segment, column) -> the idf its weights were built with
        self._vocabulary: int | None = None  # vocabulary_size(), counted once: the segments never change

    def vocabulary_size(self) -> int:
        """Distinct BM25 terms over every segment (the first, usually the largest, counted whole; a
        later one's terms looked up in those before it), deleted rows' terms included. Counted on
        the first call (a Python loop over every later segment's terms) and kept."""
        if self._vocabulary is not None:
            return self._vocabulary
        total = 0
        for s, part in enumerate(self.parts):
            if s == 0:
                total = part.terms.size
                continue
            earlier = self.parts[:s]
            total += sum(
                1 for i in range(part.terms.size) if all(e.term_id(part.term_text(i)) is None for e in earlier)
            )
        self._vocabulary = total
        return total

    # --- terms -------------------------------------------------------------------------------

    def terms(self, toks: list[str]) -> Terms:
        """Per distinct query term (in the order a build over all rows would sum them: tokens the
        corpus holds first, then the stems of the others), its column in each segment (None where
        a segment lacks it). Terms no segment holds are left out. Cached for the last queries."""
        key = tuple(toks)
        hit = self._terms.get(key)
        if hit is None:
            hit = _remember(self._terms, key, self._terms_of(toks), 512)
        return hit

    def _terms_of(self, toks: list[str]) -> Terms:
        if len(self.parts) == 1:
            return [[c] for c in self.parts[0].columns(toks)]
        stem_of = {tok: stem for tok in toks if (stem := self._surface_stem(tok)) is not None}
        missing = [t for t in toks if t not in stem_of]
        stems = dict.fromkeys([stem_of[t] for t in toks if t in stem_of] + stem_words(missing))
        out: Terms = []
        for stem in stems:
            cols = self._columns_of(stem)
            if any(c is not None for c in cols):
                out.append(cols)
        return out

    def _surface_stem(self, tok: str) -> str | None:
        """The stem of the first segment's column whose surface forms hold ``tok`` (every segment
        stems alike, so the first one to hold it speaks for all); None when none does. Cached."""
        stem = self._surface_stems.get(tok, _UNSEEN)
        if stem is not _UNSEEN:
            return stem
        stem = None
        for part in self.parts:
            pos = part.surface.find(tok)
            if pos is not None:
                stem = part.term_text(int(part.surface_terms[pos]))
                break
        return _remember(self._surface_stems, tok, stem, _WORDS_KEPT)

    def _columns_of(self, stem: str) -> list[int | None]:
        """The column of ``stem`` in each segment (None where a segment lacks it). Cached."""
        cols = self._stem_cols.get(stem)
        if cols is None:
            cols = _remember(self._stem_cols, stem, [part.term_id(stem) for part in self.parts], _WORDS_KEPT)
        return cols

    def _deleted_mask(self, s: int) -> np.ndarray:
        mask = self._deleted_masks.get(s)
        if mask is None:
            mask = np.zeros(self.parts[s].n_rows, dtype=bool)
            mask[self.seg_deleted[s]] = True
            self._deleted_masks[s] = mask
        return mask

    def _live_df(self, s: int, c: int) -> int:
        part = self.parts[s]
        a, b = int(part.indptr[c]), int(part.indptr[c + 1])
        dead = self.seg_deleted[s]
        if not len(dead):
            return b - a
        counted = self.dead_terms[s]
        if counted is not None:  # the commits counted the deleted rows' columns
            columns, rows = counted
            i = int(np.searchsorted(columns, c))
            return b - a - (int(rows[i]) if i < len(columns) and columns[i] == c else 0)
        got = self._df.get((s, c))
        if got is None:  # a pass over the column: kept, as queries share their words
            if len(dead) * 16 < b - a:
                got = b - a - count_in(part.rows[a:b], dead)
            else:
                got = b - a - int(np.count_nonzero(self._deleted_mask(s)[part.rows[a:b]]))
            self._df[(s, c)] = got
        return got

    def _df_of(self, cols: list[int | None]) -> int:
        """A term's live df over all segments (its column in each); cached."""
        key = tuple(cols)
        got = self._term_df.get(key)
        if got is None:
            got = _remember(
                self._term_df, key, sum(self._live_df(s, c) for s, c in enumerate(cols) if c is not None), _WORDS_KEPT
            )
        return got

    def idf(self, terms: Terms) -> np.ndarray:
        """Each term's idf over the live rows (float64, :func:`quarry.retrieval.bm25._idf`); cached."""
        key = tuple(tuple(cols) for cols in terms)
        got = self._idf.get(key)
        if got is None:
            df = np.array([self._df_of(cols) for cols in terms], dtype=np.int64)
            got = _remember(self._idf, key, _idf(df, self.live_rows), 512)
        return got

    # --- search ------------------------------------------------------------------------------

    def search_tokens(self, toks: list[str], n: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``n`` live rows for query tokens: (global rows int64, scores float32), best first,
        ties by row. ``mask`` (bool per global row) keeps only rows where it is True."""
        empty = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        terms = self.terms(toks)
        if not terms or n <= 0 or not self.live_rows:
            return empty
        idf = None if self.exact else self.idf(terms)  # exact: the stored weights already are the store's
        approx, lo, hi = self._approx(terms, idf)
        if len(self.deleted):
            approx[self.deleted] = 0
        if mask is not None:
            np.multiply(approx, mask, out=approx)  # in place; boolean indexing costs 10x more
        zeroed = mask is not None or bool(len(self.deleted))
        floor = self._floor(terms, approx, lo, n, zeroed)
        cand = self._listed(approx, floor, hi)
        if not len(cand):
            return empty
        if self.exact:
            scores = approx[cand]
        else:
            seg = np.searchsorted(self.offsets, cand, side="right") - 1
            values = approx[cand]
            lower, upper = values * lo[seg], values * hi[seg]
            if len(cand) > n:  # keep the rows whose upper bound reaches the n-th best lower bound
                cut = np.partition(lower, len(lower) - n)[len(lower) - n]
                keep = upper >= cut
                cand = cand[keep]
            scores = self._exact_scores(terms, idf, cand)
        pos = top_n(scores, n, cand)
        return cand[pos], scores[pos]

    def exact_scores(self, toks: list[str], rows: np.ndarray) -> np.ndarray:
        """The exact BM25 scores (float32) of global ``rows`` (sorted, distinct) for query tokens."""
        rows = np.asarray(rows, dtype=np.int64)
        terms = self.terms(toks)
        if not terms or not len(rows) or not self.live_rows:
            return np.zeros(len(rows), dtype=np.float32)
        return self._exact_scores(terms, None if self.exact else self.idf(terms), rows)

    def holds(self, toks: list[str], rows: np.ndarray) -> np.ndarray:
        """A bool per (row, token): whether global row ``rows[i]`` holds the term of ``toks[j]``
        (its stem; a token no segment holds is False everywhere). For a result's evidence: which
        query words a chunk matched (:mod:`quarry.search.relevance`)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros((len(rows), len(toks)), dtype=bool)
        if not len(rows):
            return out
        seg = np.searchsorted(self.offsets, rows, side="right") - 1
        local = rows - self.offsets[seg]
        for j, tok in enumerate(toks):
            found = self.terms([tok])
            if not found:
                continue
            for s, c in enumerate(found[0]):
                if c is None:
                    continue
                part = self.parts[s]
                a, b = int(part.indptr[c]), int(part.indptr[c + 1])
                sel = np.flatnonzero(seg == s)
                if a == b or not len(sel):
                    continue
                col_rows = part.rows[a:b]  # sorted within a column
                pos = np.minimum(np.searchsorted(col_rows, local[sel]), b - a - 1)
                out[sel[col_rows[pos] == local[sel]], j] = True
        return out

    def _approx(self, terms: Terms, idf: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stored weights summed per row — scaled by ``idf_live / idf_segment`` per term, or, in a
        segment where that ratio is the same for every query term to a thousandth (a big segment
        after small commits), unscaled with the ratio's range folded into the bounds — and per
        segment the factors that make the sums a lower and an upper bound of the exact score."""
        approx = np.zeros(self.n_rows, dtype=np.float32)
        k = len(self.parts)
        lo, hi = np.ones(k), np.ones(k)
        ratio: dict[tuple[int, int], float] = {}
        scaled = [False] * k
        if not self.exact:
            assert idf is not None  # the live idf, given whenever weights are rescored
            slack = (8 * len(terms) + 16) * _SLACK
            live = idf.tolist()
            for s, part in enumerate(self.parts):
                mine = []
                for i, cols in enumerate(terms):
                    c = cols[s]
                    if c is not None:
                        value = ratio[(i, s)] = live[i] / self._built_idf(s, c)
                        mine.append(value)
                a = self.avgdl / part.avgdl_built if part.avgdl_built else 1.0
                r_lo, r_hi = (min(mine), max(mine)) if mine else (1.0, 1.0)
                scaled[s] = r_hi > r_lo * 1.001
                if scaled[s]:
                    r_lo = r_hi = 1.0
                lo[s], hi[s] = min(1.0, a) * r_lo * (1 - slack), max(1.0, a) * r_hi * (1 + slack)
        views = self._views(approx)
        for i, cols in enumerate(terms):
            for s, c in enumerate(cols):
                if c is None:
                    continue
                part = self.parts[s]
                a, b = int(part.indptr[c]), int(part.indptr[c + 1])
                target = views[s]
                if scaled[s]:
                    target[part.rows[a:b]] += part.weights[a:b] * np.float32(ratio[(i, s)])
                else:
                    target[part.rows[a:b]] += part.weights[a:b]
        return approx, lo, hi

    def _built_idf(self, s: int, c: int) -> float:
        """The idf segment ``s`` stored column ``c``'s weights with (its own N and df); cached."""
        got = self._built.get((s, c))
        if got is None:  # a scalar, not a one-element array: a cold query asks for a few per segment
            part = self.parts[s]
            df = int(part.indptr[c + 1]) - int(part.indptr[c])
            got = self._built[(s, c)] = math.log(1.0 + (part.n_rows - df + 0.5) / (df + 0.5))
        return got

    def _views(self, approx: np.ndarray) -> list[np.ndarray]:
        """Each segment's part of a per-row array (views: indexing them with local rows needs no
        offset added to a whole posting list)."""
        bounds = self.offsets.tolist()
        return [approx[bounds[s] : bounds[s + 1]] for s in range(len(self.parts))]

    def _floor(self, terms: Terms, approx: np.ndarray, lo: np.ndarray, n: int, zeroed: bool) -> float:
        """A score the ``n``-th best row reaches for sure (lower bounds): the ``n``-th best among the
        rows of the rarest term holding at least ``n`` of them; 0 when none does. Rows below it
        cannot make the top ``n`` (ties kept), so only rows at or above it are listed: at 1M rows
        a common term matches hundreds of thousands of rows, and listing them all costs more
        than scoring them."""
        sizes = [
            sum(int(p.indptr[c + 1] - p.indptr[c]) for p, c in zip(self.parts, cols) if c is not None) for cols in terms
        ]
        views: list[np.ndarray] | None = None
        for t in sorted(range(len(terms)), key=sizes.__getitem__):
            if sizes[t] < n:
                continue
            views = views or self._views(approx)
            parts: list[np.ndarray] = []
            for s, c in enumerate(terms[t]):
                if c is None:
                    continue
                part = self.parts[s]
                a, b = int(part.indptr[c]), int(part.indptr[c + 1])
                values = views[s][part.rows[a:b]]
                parts.append(values * lo[s] if lo[s] != 1.0 else values)
            values = np.concatenate(parts) if len(parts) > 1 else parts[0]
            if zeroed:
                values = values[values > 0]  # rows a filter or a deletion dropped score 0 now
            if len(values) >= n:
                return float(np.partition(values, len(values) - n)[len(values) - n])
            return 0.0
        return 0.0

    def _listed(self, approx: np.ndarray, floor: float, hi: np.ndarray) -> np.ndarray:
        """Rows whose upper bound may reach ``floor`` (every row scoring above 0 when it is 0): one
        pass with the largest upper factor; the exact pass ranks what it lists."""
        if floor <= 0:
            return np.flatnonzero(approx)
        if self.exact:
            return np.flatnonzero(approx >= floor)
        return np.flatnonzero(approx >= floor / float(hi.max()) * (1 - 4 * _SLACK))

    def _exact_scores(self, terms: Terms, idf: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
        """Scores of sorted global ``rows``, computed as a build over all live rows computes them:
        per term in order, w = idf·tf·(k1+1)/(tf + k1·(1 − b + b·len/avgdl)) in float64, rounded to
        float32 and added in float32. Segment by segment (a row's terms are still added in order),
        so each segment's rows and lengths are looked up once."""
        out = np.zeros(len(rows), dtype=np.float32)
        cuts = np.searchsorted(rows, self.offsets).tolist()
        for s, part in enumerate(self.parts):
            if cuts[s] == cuts[s + 1]:
                continue
            if part.tf is None and not self.exact:
                raise ValueError(
                    "a segment without term frequencies (an index from an older quarry) cannot be "
                    "rescored: rebuild it with `quarry maintain`"
                )
            target = out[cuts[s] : cuts[s + 1]]
            local = (rows[cuts[s] : cuts[s + 1]] - self.offsets[s]).astype(self.local_dtype, copy=False)
            norm = None
            if not self.exact:
                assert part.length is not None  # stored with the term frequencies (checked above)
                norm = _length_norm(part.length[local].astype(np.float64), self.avgdl)
            for i, cols in enumerate(terms):
                c = cols[s]
                if c is None:
                    continue
                a, b = int(part.indptr[c]), int(part.indptr[c + 1])
                if a == b:
                    continue
                col_rows = part.rows[a:b]
                pos = np.searchsorted(col_rows, local)
                np.minimum(pos, b - a - 1, out=pos)
                hit = np.flatnonzero(col_rows[pos] == local)
                if not len(hit):
                    continue
                if self.exact:  # the stored weights are the store's
                    target[hit] += part.weights[a + pos[hit]]
                    continue
                # rescoring: the live idf given, the term frequencies checked above, the lengths normed
                assert idf is not None and part.tf is not None and norm is not None
                tf = part.tf[a + pos[hit]].astype(np.float64)
                target[hit] += _normed_weights(idf[i], tf, norm[hit])
        return out


class SegmentedDense:
    """Vector search over several segments' :class:`~quarry.retrieval.dense.DenseIndex`, deleted
    rows left out (see the module docstring)."""

    def __init__(self, parts: list[DenseIndex], deleted: np.ndarray):
        self.parts = parts
        self.offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([p.n_rows for p in parts], out=self.offsets[1:])
        self.n_rows = int(self.offsets[-1])
        self.seg_deleted = split_rows(np.asarray(deleted, dtype=np.int64), self.offsets)
        self.dim = next((p.dim for p in parts if p.n_rows), parts[0].dim if parts else 0)
        self._live: dict[int, tuple[np.ndarray, int]] = {}
        self._masks: list[tuple[np.ndarray, list[tuple[np.ndarray, int]]]] = []  # (filter, per segment)

    @property
    def has_ivf(self) -> bool:
        return any(p.has_ivf for p in self.parts)

    def _live_mask(self, s: int) -> tuple[np.ndarray, int]:
        got = self._live.get(s)
        if got is None:
            mask = np.ones(self.parts[s].n_rows, dtype=bool)
            mask[self.seg_deleted[s]] = False
            got = self._live[s] = (mask, int(np.count_nonzero(mask)))
        return got

    def _segment_masks(self, mask: np.ndarray) -> list[tuple[np.ndarray, int]]:
        """The filter cut into segments, deleted rows dropped, with the rows each keeps; cached for
        the last few masks (the same array object comes back query after query, so each
        segment's own mask cache hits too)."""
        for held, per in self._masks:
            if held is mask:
                return per
        per = []
        for s in range(len(self.parts)):
            part = mask[self.offsets[s] : self.offsets[s + 1]]
            if len(self.seg_deleted[s]):
                part = part & self._live_mask(s)[0]
            else:
                part = np.ascontiguousarray(part)
            per.append((part, int(np.count_nonzero(part))))
        self._masks = [(mask, per)] + self._masks[:3]
        return per

    def cosines(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The cosine of ``query`` with each global row of ``rows`` (float32, in their order)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros(len(rows), dtype=np.float32)
        seg = np.searchsorted(self.offsets, rows, side="right") - 1
        for s in np.unique(seg).tolist():
            sel = np.flatnonzero(seg == s)
            out[sel] = self.parts[s].cosines(query, rows[sel] - self.offsets[s])
        return out

    def search(
        self,
        query: np.ndarray,
        n: int,
        mask: np.ndarray | None = None,
        method: str = "auto",
        kept: int | None = None,
        rescore_multiplier: int = 20,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``n`` live rows by cosine: (global rows int64, scores float32), ties by row id."""
        rows: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        probes: dict[int, list[int]] = {}  # segments laid out by the base's clusters rank them once
        masks = self._segment_masks(mask) if mask is not None else None
        for s, part in enumerate(self.parts):
            if part.n_rows == 0:
                continue
            dead = self.seg_deleted[s]
            if masks is not None:
                seg_mask, seg_kept = masks[s]
                if not seg_kept:
                    continue
                r, sc = part.search(
                    query,
                    n,
                    seg_mask,
                    method=method,
                    kept=seg_kept,
                    rescore_multiplier=rescore_multiplier,
                    probes=probes,
                )
            elif not len(dead):
                r, sc = part.search(query, n, method=method, rescore_multiplier=rescore_multiplier, probes=probes)
            elif method != "binary":
                r, sc = part.search(
                    query, n, method=method, rescore_multiplier=rescore_multiplier, dead=dead, probes=probes
                )
            elif len(dead) <= DELETED_SKIP:  # binary: ask for n plus the deleted rows, drop them
                r, sc = part.search(query, n + len(dead), method=method, rescore_multiplier=rescore_multiplier)
                alive = ~np.isin(r, dead)
                r, sc = r[alive][:n], sc[alive][:n]
            else:
                live, count = self._live_mask(s)
                if not count:
                    continue
                r, sc = part.search(
                    query, n, live, method=method, kept=count, rescore_multiplier=rescore_multiplier, probes=probes
                )
            rows.append(r + self.offsets[s])
            scores.append(sc)
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows_all = np.concatenate(rows) if len(rows) > 1 else rows[0]
        scores_all = np.concatenate(scores) if len(scores) > 1 else scores[0]
        pos = top_n(scores_all, n, rows_all)
        return rows_all[pos], scores_all[pos]
