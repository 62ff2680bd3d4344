"""BM25 over a persisted sparse matrix of precomputed term weights.

Built once per committed generation from the catalog (``build``), saved as ``.npy`` files and
memory-mapped by readers (``quarry.retrieval.searchindex.SearchIndex.load``), so opening costs milliseconds
and a query costs one slice of the matrix per query term.

Scoring is Okapi BM25 with Lucene's non-negative IDF::

    idf(t)    = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    w(t, d)   = idf(t) · tf(t, d) · (k1 + 1) / (tf(t, d) + k1 · (1 - b + b · len(d) / avgdl))
    score(d)  = Σ w(t, d) over the distinct (stemmed) terms t of the query

with k1 = 1.2, b = 0.75 and the natural logarithm. N is the number of chunks, ``len(d)`` the
number of terms of chunk ``d`` after stop words are dropped, ``avgdl`` the mean of ``len`` over
all chunks. DuckDB's ``match_bm25`` computes the same formula with ``log()``, which is base 10
there: its scores are these divided by ln 10, in the same order (``tests/test_bm25.py`` checks
this on real text). Terms are the tokens of :mod:`quarry.retrieval.textnorm` (numbers and codes kept,
compounds also split), minus the English stop words, Porter-stemmed by PyStemmer's ``porter``
(Snowball's C code, the algorithm DuckDB's ``stem(word, 'porter')`` runs). It replaced a
hand-written stemmer that gave the same stem for all 88,582 distinct non-stop-word tokens of
SciFact, Cranfield and the handbook, 3.7x slower.

Why this index stays hand-written rather than DuckDB's FTS extension or a BM25 library: it is
memory-mapped per committed generation, so a reader opens it in milliseconds with neither
DuckDB's FTS extension (about half a second to load) nor a Python object graph to unpickle,
and a query costs one slice of a CSC matrix per term. Its scores equal ``match_bm25``'s up to
the constant ln 10 (``tests/test_bm25.py`` on real text), and the file format is what
``quarry.retrieval.searchindex`` commits atomically with the catalog. DuckDB's own full-text tables
remain available to SQL users (``match_bm25``, built by the first query that needs them;
docs/export.md).

Files (``bm25.*`` in the generation's index folder):

- ``bm25.terms.bin`` + ``bm25.term_offsets.npy``: the sorted stemmed terms (UTF-8, concatenated)
- ``bm25.surface.bin`` + ``bm25.surface_offsets.npy`` + ``bm25.surface_terms.npy``: every
  distinct unstemmed token of the corpus with its term id, so a query runs the stemmer
  only for tokens the corpus does not contain
- ``bm25.indptr.npy`` (int64, terms + 1), ``bm25.rows.npy`` (int32), ``bm25.weights.npy``
  (float32): the CSC matrix of ``w(t, d)``, one column per term, rows in chunk_id order;
- ``bm25.tf.npy`` (the smallest unsigned type that holds the largest) beside it: each posting's
  term frequency, and ``bm25.length.npy`` (uint32): each row's ``len(d)``. With them a segment's
  weights can be recomputed exactly under the statistics of a whole store of several segments
  (:mod:`quarry.retrieval.segmented`), where N, df and avgdl are not the segment's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from quarry.core.sqlfiles import load_sql
from quarry.retrieval.select import top_n
from quarry.retrieval.stopwords import STOPWORDS
from quarry.retrieval.textnorm import tokens

if TYPE_CHECKING:
    import pyarrow as pa
    from duckdb import DuckDBPyConnection

K1 = 1.2
B = 0.75

_stemmers = threading.local()  # a PyStemmer object is not safe to share between threads


def stem_words(words: list[str]) -> list[str]:
    """The Porter stems of lower-case ``words`` (Snowball's ``porter``, as DuckDB's ``stem``)."""
    stemmer = getattr(_stemmers, "porter", None)
    if stemmer is None:
        import Stemmer  # PyStemmer

        stemmer = _stemmers.porter = Stemmer.Stemmer("porter")
    stems: list[str] = stemmer.stemWords(words)
    return stems


SLICE_ROWS = 32_768  # chunks tokenised at a time: bounds the working memory of a build


def build(
    con: DuckDBPyConnection, n_rows: int, slice_rows: int = SLICE_ROWS
) -> tuple[dict[str, np.ndarray | bytes], dict[str, Any]]:
    """The BM25 arrays for the chunks in the catalog ``con``.

    Returns ``(arrays, info)``; ``arrays`` maps file names to contents. The texts stream from
    DuckDB ``slice_rows`` chunks at a time, so memory holds one slice's token occurrences plus
    the compact postings of all slices (term, row in the slice, tf: 7-10 bytes a posting), never
    every token occurrence of the corpus. A slice is vectorised with Arrow and numpy: split its
    tokens, dictionary-encode them, give the distinct tokens new to the build a term (stemming
    only those: a few tens of thousands, not the millions of occurrences), then count (term, row)
    pairs with one sort. Terms are numbered as met and renumbered in sorted order at the end,
    when the postings are scattered into CSC order with their weights. The files do not depend
    on ``slice_rows`` (``tests/test_bm25.py`` compares them byte for byte).
    """
    reader = con.execute(load_sql("bm25_texts")).fetch_record_batch(max(1, slice_rows))
    return _build((batch.column(0) for batch in reader), n_rows)


def build_texts(
    texts: pa.Array | pa.ChunkedArray, n_rows: int, slice_rows: int = SLICE_ROWS
) -> tuple[dict[str, np.ndarray | bytes], dict[str, Any]]:
    """The BM25 arrays of ``texts``: an Arrow string array of space-separated
    :func:`quarry.retrieval.textnorm.bm25_text` tokens, one per row (see :func:`build`)."""
    step = max(1, slice_rows)
    texts = texts.combine_chunks() if hasattr(texts, "combine_chunks") else texts  # one dictionary per slice
    return _build((texts.slice(i, step) for i in range(0, len(texts), step)), n_rows)


def _build(slices_of_texts: Iterable[pa.Array], n_rows: int) -> tuple[dict[str, np.ndarray | bytes], dict[str, Any]]:
    t0 = time.perf_counter()
    vocab = _Vocab()
    slices: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
    length = np.zeros(n_rows, dtype=np.float64)  # terms per row (integers, exact in float64)
    start = 0
    for texts in slices_of_texts:
        n = len(texts)
        if start + n > n_rows:
            raise ValueError(f"more texts than the {n_rows} rows of the index (the catalog changed during the build?)")
        terms, rows, tf = _slice_postings(texts, vocab)
        length[start : start + n] = np.bincount(rows, weights=tf, minlength=n)
        vocab.count(terms)
        slices.append((start, terms, rows, tf))
        start += n
    stems, final = vocab.sorted_terms()  # final[term as met] = its place in sorted order
    df = np.zeros(len(stems), dtype=np.int64)
    df[final] = vocab.df[: len(stems)]
    indptr = np.zeros(len(stems) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    avgdl = float(length.mean()) if n_rows else 0.0
    idf = _idf(df, n_rows)
    rows_out = np.empty(int(indptr[-1]), dtype=np.int32)
    weights = np.empty(int(indptr[-1]), dtype=np.float32)
    max_tf = max((int(tf.max()) for _, _, _, tf in slices if len(tf)), default=0)
    tf_out = np.empty(int(indptr[-1]), dtype=np.min_scalar_type(max_tf))
    cursor = indptr[:-1].copy()
    slices.reverse()
    while slices:  # in row order, each slice freed once scattered
        offset, terms, rows, tf = slices.pop()
        terms = final[terms]
        rows = rows.astype(np.int64) + offset
        # A slice's postings are sorted by term, then row: each goes to its column's cursor plus
        # its rank in the slice's run of that term, so the rows of a column stay ascending.
        first = np.flatnonzero(np.r_[True, terms[1:] != terms[:-1]]) if len(terms) else np.zeros(0, np.int64)
        run = np.diff(np.r_[first, len(terms)])
        pos = cursor[terms] + (np.arange(len(terms)) - np.repeat(first, run))
        cursor[terms[first]] += run
        rows_out[pos] = rows
        tf_out[pos] = tf
        weights[pos] = _weights(idf[terms], tf.astype(np.float64), length[rows], avgdl)
    surface, surface_terms = vocab.surface()
    term_blob, term_offsets = _pack(stems)
    surface_blob, surface_offsets = _pack(surface)
    arrays = {
        "bm25.terms.bin": term_blob,
        "bm25.term_offsets.npy": term_offsets,
        "bm25.surface.bin": surface_blob,
        "bm25.surface_offsets.npy": surface_offsets,
        "bm25.surface_terms.npy": final[surface_terms].astype(np.int32),
        "bm25.indptr.npy": indptr,
        "bm25.rows.npy": rows_out,
        "bm25.weights.npy": weights,
        "bm25.tf.npy": tf_out,
        "bm25.length.npy": length.astype(np.uint32),
    }
    info = {
        "terms": len(stems),
        "tokens": len(surface),
        "postings": int(len(rows_out)),
        "avgdl": round(avgdl, 3),
        "rows": n_rows,
        "length": int(length.sum()),
        "k1": K1,
        "b": B,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return arrays, info


def _slice_postings(texts: pa.Array, vocab: _Vocab) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (term as met, row in the slice, tf) of one slice of texts, sorted by term then row,
    in small dtypes (they are held until the end of the build)."""
    import pyarrow.compute as pc

    n = len(texts)
    lists = pc.split_pattern(pc.fill_null(texts, ""), " ")
    occurrence_rows = pc.list_parent_indices(lists).to_numpy()
    encoded = pc.dictionary_encode(pc.list_flatten(lists))
    occurrence_terms = vocab.ids(encoded.dictionary.to_pylist())[encoded.indices.to_numpy()]
    counted = occurrence_terms >= 0
    keys, tf = np.unique(occurrence_terms[counted] * max(n, 1) + occurrence_rows[counted], return_counts=True)
    terms, rows = (keys // max(n, 1)).astype(np.int32), keys % max(n, 1)
    small = np.uint16 if n <= 1 << 16 else np.int32
    return terms, rows.astype(small), tf.astype(np.min_scalar_type(int(tf.max()) if len(tf) else 0))


def row_columns(index: BM25Index, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The columns of ``index`` that rows of these texts (their ``search_text``, as the build read
    them) hold, ascending, and in how many of the rows each: the document frequencies the rows add.

    A token is looked up among the index's own surface forms, so a row gets exactly the columns
    the build gave it (a stop word, or a token of no row, has none); each distinct token is looked
    up once. A commit counts the rows it deletes this way (quarry/store/writer.py), so readers
    need not count deleted rows in each query term's column (quarry/retrieval/segmented.py)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(texts)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lists = pc.split_pattern(pc.fill_null(pa.array(texts, pa.string()), ""), " ")
    rows = pc.list_parent_indices(lists).to_numpy().astype(np.int64)
    encoded = pc.dictionary_encode(pc.list_flatten(lists))
    column = np.array(
        [
            -1 if (pos := index.surface.find(word)) is None else int(index.surface_terms[pos])
            for word in encoded.dictionary.to_pylist()
        ],
        dtype=np.int64,
    )
    terms = column[encoded.indices.to_numpy()] if len(rows) else np.zeros(0, dtype=np.int64)
    kept = terms >= 0
    pairs = np.unique(terms[kept] * n + rows[kept])  # a column once per row
    return np.unique(pairs // n, return_counts=True)


class _Vocab:
    """Surface tokens and stemmed terms met so far; terms are numbered in the order met."""

    def __init__(self) -> None:
        self.by_surface: dict[str, int] = {}  # token -> term, -1 for a stop word or ""
        self.by_stem: dict[str, int] = {}
        self.df = np.zeros(1024, dtype=np.int64)

    def ids(self, words: list[str]) -> np.ndarray:
        """The term of each distinct token (-1: not counted), stemming only tokens new here."""
        out = np.empty(len(words), dtype=np.int64)
        new = []
        for i, word in enumerate(words):
            term = self.by_surface.get(word)
            if term is None:
                new.append(i)
            else:
                out[i] = term
        kept = [i for i in new if words[i] and words[i] not in STOPWORDS]
        for i in new:
            self.by_surface[words[i]] = out[i] = -1
        for i, stem in zip(kept, stem_words([words[i] for i in kept])):
            term = self.by_stem.setdefault(stem, len(self.by_stem))
            self.by_surface[words[i]] = out[i] = term
        return out

    def count(self, terms: np.ndarray) -> None:
        """Add a slice's postings (one per term and row) to the document frequencies."""
        if len(self.by_stem) > len(self.df):
            self.df = np.concatenate(
                [self.df, np.zeros(max(len(self.by_stem), 2 * len(self.df)) - len(self.df), dtype=np.int64)]
            )
        self.df[: len(self.by_stem)] += np.bincount(terms, minlength=len(self.by_stem))

    def sorted_terms(self) -> tuple[list[str], np.ndarray]:
        """The stems in sorted order, and the sorted place of each term as met."""
        stems = list(self.by_stem)
        order = sorted(range(len(stems)), key=stems.__getitem__)
        final = np.empty(len(stems), dtype=np.int64)
        final[order] = np.arange(len(stems))
        return [stems[i] for i in order], final

    def surface(self) -> tuple[list[str], np.ndarray]:
        """The counted tokens in sorted order and their terms as met."""
        kept = sorted(w for w, t in self.by_surface.items() if t >= 0)
        return kept, np.array([self.by_surface[w] for w in kept], dtype=np.int64)


def _pack(words: list[str]) -> tuple[bytes, np.ndarray]:
    """Sorted strings as one UTF-8 blob plus offsets; refuses input not sorted by bytes."""
    encoded = [w.encode("utf-8") for w in words]
    if any(a >= b for a, b in zip(encoded, encoded[1:])):
        raise ValueError("a BM25 vocabulary must be sorted and distinct")
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return b"".join(encoded), offsets


def bm25_weights(
    term_ids: np.ndarray, rows: np.ndarray, tf: np.ndarray, n_terms: int, n_rows: int
) -> tuple[np.ndarray, float]:
    """``w(t, d)`` for each posting (see the module docstring), float32, and avgdl."""
    length = np.bincount(rows, weights=tf, minlength=n_rows)
    avgdl = float(length.mean()) if n_rows else 0.0
    idf = _idf(np.bincount(term_ids, minlength=n_terms), n_rows)
    return _weights(idf[term_ids], tf, length[rows], avgdl), avgdl


def _idf(df: np.ndarray, n_rows: int) -> np.ndarray:
    df = df.astype(np.float64)
    return np.log(1.0 + (n_rows - df + 0.5) / (df + 0.5))


def _weights(idf: np.ndarray, tf: np.ndarray, length: np.ndarray, avgdl: float) -> np.ndarray:
    """``w(t, d)`` of postings from their term's idf, tf and row length (float64), as float32."""
    return _normed_weights(idf, tf, _length_norm(length, avgdl))


def _length_norm(length: np.ndarray, avgdl: float) -> np.ndarray:
    """``k1 · (1 − b + b · len(d) / avgdl)`` of rows' lengths (float64): what :func:`_weights` divides
    by, apart from tf; computed once per row when several terms are weighted for the same rows."""
    return K1 * (1.0 - B + B * length / (avgdl or 1.0))


def _normed_weights(idf: np.ndarray | float, tf: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """:func:`_weights` from the rows' :func:`_length_norm` (the same float64 operations, so the
    same float32 weights); ``idf`` per posting, or one term's for all."""
    weights: np.ndarray = (idf * tf * (K1 + 1.0) / (tf + norm)).astype(np.float32)
    return weights


def query_tokens(text: str) -> list[str]:
    """The distinct, unstemmed BM25 tokens of a query (stop words dropped), in order."""
    return [t for t in dict.fromkeys(tokens(text)) if t not in STOPWORDS]


class Vocabulary:
    """Sorted strings packed as a blob plus offsets (in memory or memory-mapped)."""

    DICT_MAX = 1 << 16  # a vocabulary this small is looked up through a dict, built on first use

    def __init__(self, blob: bytes | np.ndarray, offsets: np.ndarray):
        self.blob = blob
        self.offsets = offsets
        self.size = len(offsets) - 1
        self._dict: dict[bytes, int] | None = None

    def _at(self, i: int) -> bytes:
        part = self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])]
        return part if isinstance(part, bytes) else part.tobytes()

    def find(self, word: str) -> int | None:
        """The position of ``word``, by binary search (a dict for a small vocabulary, such as a
        small segment's: a query looks its words up in every segment); None when absent."""
        key = word.encode("utf-8")
        if self.size <= self.DICT_MAX:
            if self._dict is None:
                blob = self.blob if isinstance(self.blob, bytes) else self.blob.tobytes()
                bounds = self.offsets.tolist()
                self._dict = {blob[bounds[i] : bounds[i + 1]]: i for i in range(self.size)}
            return self._dict.get(key)
        lo, hi = 0, self.size
        while lo < hi:
            mid = (lo + hi) // 2
            if self._at(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < self.size and self._at(lo) == key else None


class BM25Index:
    """A loaded BM25 index."""

    def __init__(self, arrays: dict[str, Any], n_rows: int):
        self.terms = Vocabulary(arrays["bm25.terms.bin"], arrays["bm25.term_offsets.npy"])
        self.surface = Vocabulary(arrays["bm25.surface.bin"], arrays["bm25.surface_offsets.npy"])
        self.surface_terms = arrays["bm25.surface_terms.npy"]
        self.indptr = arrays["bm25.indptr.npy"]
        self.rows = arrays["bm25.rows.npy"]
        self.weights = arrays["bm25.weights.npy"]
        self.n_rows = n_rows
        # Term frequencies and row lengths (absent from indexes of older quarry versions), for
        # rescoring under the statistics of several segments (quarry/retrieval/segmented.py).
        self.tf: np.ndarray | None = arrays.get("bm25.tf.npy")
        self.length: np.ndarray | None = arrays.get("bm25.length.npy")
        self.length_total = int(self.length.sum(dtype=np.int64)) if self.length is not None else None
        self.avgdl_built = self.length_total / n_rows if self.length_total is not None and n_rows else 0.0

    def lookup(self, toks: list[str]) -> tuple[list[int], list[str]]:
        """Term ids of (unstemmed) tokens the corpus contains, and the tokens it does not.

        A token missing here may still share a stem with a corpus term: stem it and pass the
        stem to :meth:`term_id`.
        """
        ids, missing = [], []
        for tok in toks:
            pos = self.surface.find(tok)
            if pos is None:
                missing.append(tok)
            else:
                ids.append(int(self.surface_terms[pos]))
        return ids, missing

    def term_id(self, term: str) -> int | None:
        """The column of a stemmed ``term``."""
        return self.terms.find(term)

    def term_text(self, column: int) -> str:
        """The stemmed term of a column."""
        return self.terms._at(column).decode("utf-8")

    def columns(self, toks: list[str]) -> list[int]:
        """The distinct columns of query tokens (see :func:`query_tokens`); unknown ones dropped."""
        ids, missing = self.lookup(toks)
        ids += [c for c in (self.term_id(t) for t in stem_words(missing)) if c is not None]
        return list(dict.fromkeys(ids))

    def scores(self, cols: list[int]) -> np.ndarray:
        """Dense BM25 scores over all rows (float32) for distinct term columns ``cols``."""
        out = np.zeros(self.n_rows, dtype=np.float32)
        for c in dict.fromkeys(cols):
            a, b = int(self.indptr[c]), int(self.indptr[c + 1])
            out[self.rows[a:b]] += self.weights[a:b]  # a row appears once per column
        return out

    def search(self, cols: list[int], n: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``n`` rows for term columns ``cols``: (rows int64, scores float32), best first, ties
        by row. ``mask`` (bool per row) keeps only rows where it is True, before the top ``n``."""
        if not cols:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        cols = list(dict.fromkeys(cols))
        scores = self.scores(cols)
        if mask is not None:
            np.multiply(scores, mask, out=scores)  # in place; boolean indexing costs 10x more
        floor = self._floor(cols, scores, n, mask)
        hit = np.flatnonzero(scores >= floor) if floor > 0 else np.flatnonzero(scores)
        rows = hit[top_n(scores[hit], n, hit)]
        return rows, scores[rows]

    def _floor(self, cols: list[int], scores: np.ndarray, n: int, mask: np.ndarray | None) -> float:
        """A score the ``n``-th best row reaches for sure: the ``n``-th best final score among
        the rows of the rarest column holding at least ``n`` (kept) rows; 0 when none does.

        Rows below it cannot make the top ``n``, so the scan keeps only rows at or above it
        (ties included, so the result is the same): at 1M chunks a common query term matches
        hundreds of thousands of rows, and listing them all costs more than scoring them.
        """
        best = 0.0
        for c in sorted(cols, key=lambda c: int(self.indptr[c + 1] - self.indptr[c])):
            a, b = int(self.indptr[c]), int(self.indptr[c + 1])
            if b - a < n:
                continue
            values = scores[self.rows[a:b]]
            if mask is not None:
                values = values[values > 0]  # rows the mask dropped score 0 now
            if len(values) >= n:
                best = float(np.partition(values, len(values) - n)[len(values) - n])
                break
        return best
