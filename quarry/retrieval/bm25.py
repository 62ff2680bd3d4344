"""BM25 over a persisted sparse matrix of precomputed term weights.

Built once per committed generation from the catalog (``build``), saved as ``.npy`` files and
memory-mapped by readers (``BM25Index.load``), so opening costs milliseconds and a query costs
one slice per query term.

Scoring is Okapi BM25 with Lucene's non-negative IDF, the formula of DuckDB's ``match_bm25``::

    idf(t)    = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    w(t, d)   = idf(t) · tf(t, d) · (k1 + 1) / (tf(t, d) + k1 · (1 - b + b · len(d) / avgdl))
    score(d)  = Σ w(t, d) over the distinct (stemmed) terms t of the query

with k1 = 1.2, b = 0.75; N is the number of chunks, ``len(d)`` the number of terms of chunk
``d`` after stop words are dropped, ``avgdl`` the mean of ``len`` over all chunks. Terms are the
tokens of :mod:`quarry.textnorm` (numbers and codes kept, compounds also split), minus the
English stop words, Porter-stemmed by DuckDB's ``stem()``.

Files (``bm25.*`` in the generation's index folder):

- ``bm25.terms.bin`` + ``bm25.term_offsets.npy``: the sorted vocabulary (UTF-8, concatenated)
- ``bm25.indptr.npy`` (int64, terms + 1), ``bm25.rows.npy`` (int32), ``bm25.weights.npy``
  (float32): the CSC matrix of ``w(t, d)``, one column per term, rows in chunk_id order.
"""

from __future__ import annotations

import time
import numpy as np

from quarry.retrieval.select import top_n
from quarry.retrieval.stopwords import STOPWORDS
from quarry.sqlfiles import load_sql, statements
from quarry.textnorm import tokens

K1 = 1.2
B = 0.75


def build(con, n_rows: int) -> tuple[dict[str, np.ndarray | bytes], dict]:
    """The BM25 arrays for the chunks in the catalog ``con`` (any connection with FTS loaded).

    Returns ``(arrays, info)``; ``arrays`` maps file names to contents.
    """
    t0 = time.perf_counter()
    for stmt in statements("bm25_terms"):
        con.execute(stmt, [sorted(STOPWORDS)] if "$1" in stmt else None)
    post = con.execute(load_sql("bm25_postings")).fetchnumpy()
    terms = [r[0] for r in con.execute(load_sql("bm25_vocab")).fetchall()]
    con.execute("DROP TABLE IF EXISTS bm25_tf")
    con.execute("DROP TABLE IF EXISTS bm25_vocab")
    term_ids = np.asarray(post["term_id"], dtype=np.int64)
    rows = np.asarray(post["row_id"], dtype=np.int32)
    tf = np.asarray(post["tf"], dtype=np.float64)
    weights, avgdl = bm25_weights(term_ids, rows, tf, len(terms), n_rows)
    indptr = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(np.bincount(term_ids, minlength=len(terms)), out=indptr[1:])
    encoded = [t.encode("utf-8") for t in terms]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    arrays = {
        "bm25.terms.bin": b"".join(encoded),
        "bm25.term_offsets.npy": offsets,
        "bm25.indptr.npy": indptr,
        "bm25.rows.npy": rows,
        "bm25.weights.npy": weights,
    }
    info = {"terms": len(terms), "postings": int(len(rows)), "avgdl": avgdl, "k1": K1, "b": B,
            "seconds": round(time.perf_counter() - t0, 3)}
    return arrays, info


def bm25_weights(term_ids: np.ndarray, rows: np.ndarray, tf: np.ndarray, n_terms: int, n_rows: int):
    """``w(t, d)`` for each posting (see the module docstring), float32, and avgdl."""
    length = np.bincount(rows, weights=tf, minlength=n_rows)
    avgdl = float(length.mean()) if n_rows else 0.0
    df = np.bincount(term_ids, minlength=n_terms).astype(np.float64)
    idf = np.log(1.0 + (n_rows - df + 0.5) / (df + 0.5))
    norm = K1 * (1.0 - B + B * length[rows] / (avgdl or 1.0))
    return (idf[term_ids] * tf * (K1 + 1.0) / (tf + norm)).astype(np.float32), avgdl


def query_tokens(text: str) -> list[str]:
    """The distinct, unstemmed BM25 tokens of a query (stop words dropped), in order."""
    return [t for t in dict.fromkeys(tokens(text)) if t not in STOPWORDS]


class BM25Index:
    """A loaded BM25 index; ``search`` takes stemmed terms."""

    def __init__(self, arrays: dict, n_rows: int):
        self.terms = arrays["bm25.terms.bin"]
        self.offsets = arrays["bm25.term_offsets.npy"]
        self.indptr = arrays["bm25.indptr.npy"]
        self.rows = arrays["bm25.rows.npy"]
        self.weights = arrays["bm25.weights.npy"]
        self.n_rows = n_rows
        self.n_terms = len(self.offsets) - 1

    def term_id(self, term: str) -> int | None:
        """The column of ``term``, by binary search over the sorted vocabulary."""
        key = term.encode("utf-8")
        lo, hi = 0, self.n_terms
        while lo < hi:
            mid = (lo + hi) // 2
            if self._term(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < self.n_terms and self._term(lo) == key else None

    def _term(self, i: int) -> bytes:
        blob = self.terms[int(self.offsets[i]):int(self.offsets[i + 1])]
        return blob if isinstance(blob, bytes) else blob.tobytes()

    def scores(self, terms: list[str]) -> np.ndarray | None:
        """Dense BM25 scores over all rows (float32), or None when no term is known."""
        cols = [c for c in (self.term_id(t) for t in dict.fromkeys(terms)) if c is not None]
        if not cols:
            return None
        out = np.zeros(self.n_rows, dtype=np.float32)
        for c in cols:
            a, b = int(self.indptr[c]), int(self.indptr[c + 1])
            out[self.rows[a:b]] += self.weights[a:b]  # a row appears once per column
        return out

    def search(self, terms: list[str], n: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``n`` rows for stemmed ``terms``: (rows int64, scores float32), best first, ties by row.

        ``mask`` (bool per row) keeps only the rows where it is True, before the top ``n`` are taken.
        """
        scores = self.scores(terms)
        if scores is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if mask is not None:
            scores[~mask] = 0.0
        hit = np.flatnonzero(scores)
        rows = hit[top_n(scores[hit], n, hit)]
        return rows, scores[rows]
