"""Document cards: BM25 over what names each document, and every row's document.

A card is a document's path under its indexed root and the company, type, period and fiscal year
its parser found (``metadata.company``, ``doc_type``, ``period``, ``fiscal_year``; a filing's
cover page states them): ``ADOBE_2017_10K.pdf ADOBE SYSTEMS INCORPORATED Form 10-K annual report
fiscal year 2017 (ended December 1, 2017) FY2017`` (``sql/index_cards.sql``). Not the title: a title summarises the content, which the chunks
already carry (SciFact's paper titles as cards cost its train queries 0.025 nDCG@10 at the
weight below), while a path and a filing's facets say *which* document it is. A question that
names a company and a year names a card; the chunks holding the answer (a table row, a
paragraph) rarely repeat either, and in chunk-level BM25 the header words that do repeat them in
every chunk of a filing weigh little (hundreds of chunks share them). Scoring the cards as
documents of their own gives that match its weight once per document;
:func:`quarry.search.fusion.with_documents` adds it to the fused score of the document's chunks.

Files (``cards.*`` in the generation's index folder, rewritten with ``docs.arrow`` at every
commit, since a move changes a path):

- ``cards.terms.bin`` … ``cards.weights.npy``: the BM25 arrays of :mod:`quarry.retrieval.bm25`, one
  row per document in ``docs.arrow`` order (doc_id order);
- ``cards.row_doc.npy`` (int32, one per chunk row): the row's document, its position in
  ``docs.arrow`` (-1 if the catalog lacks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from quarry.core.sqlfiles import load_sql
from quarry.retrieval import bm25
from quarry.retrieval.textnorm import bm25_text

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

    from quarry.retrieval.rows import SegmentedRows
    from quarry.retrieval.segmented import SegmentedBM25

PREFIX = "cards."
ROW_DOC = "cards.row_doc.npy"


def build(
    con: DuckDBPyConnection, docs: pa.Table, row_docs: pa.Array | pa.ChunkedArray
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The card arrays for the catalog ``con``, whose documents are ``docs`` (``docs.arrow``) and
    whose chunk rows belong to the documents ``row_docs`` (``rows.arrow``'s doc_id column)."""
    import pyarrow.compute as pc

    table = con.execute(load_sql("index_cards")).fetch_arrow_table()
    if table.column("doc_id").to_pylist() != docs.column("doc_id").to_pylist():
        raise ValueError("document cards and docs.arrow disagree on the documents")
    texts = [bm25_text(t or "") for t in table.column("card").to_pylist()]
    arrays, info = bm25.build_texts(pa.array(texts, type=pa.string()), len(texts))
    out: dict[str, Any] = {PREFIX + name.removeprefix("bm25."): value for name, value in arrays.items()}
    where = pc.index_in(row_docs, value_set=docs.column("doc_id").combine_chunks())
    out[ROW_DOC] = where.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    return out, {"documents": len(texts), "terms": info["terms"], "length": info["length"]}


class Cards:
    """Loaded cards: the documents' BM25 scores for a query, and each row's document."""

    def __init__(self, arrays: Mapping[str, Any], n_docs: int):
        renamed = {
            "bm25." + name.removeprefix(PREFIX): value
            for name, value in arrays.items()
            if name.startswith(PREFIX) and name != ROW_DOC
        }
        self.row_doc = arrays[ROW_DOC]
        self.n_docs = n_docs
        self.bm25 = bm25.BM25Index(renamed, n_docs)

    @staticmethod
    def present(arrays: Mapping[str, object]) -> bool:
        return ROW_DOC in arrays

    def doc_scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 of every document's card for the query's tokens (float32, 0 where none matches)."""
        return self.bm25.scores(self.bm25.columns(query_tokens))


class SegmentedCards:
    """The cards of a generation of several segments: BM25 over its live documents' cards
    (:class:`~quarry.retrieval.segmented.SegmentedBM25`, exact) and each chunk row's document
    (:meth:`quarry.retrieval.rows.SegmentedRows.doc_rows`)."""

    def __init__(self, bm25_index: SegmentedBM25, results: SegmentedRows):
        self.bm25 = bm25_index
        self.results = results

    def doc_scores(self, query_tokens: list[str]) -> np.ndarray:
        """Exact card scores of every document row (float32; 0 for rows no longer live)."""
        live = np.setdiff1d(np.arange(self.bm25.n_rows), self.bm25.deleted)
        out = np.zeros(self.bm25.n_rows, dtype=np.float32)
        out[live] = self.bm25.exact_scores(query_tokens, live)
        return out

    def doc_position(self, doc_id: str) -> int:
        """The live document row of ``doc_id`` (its place in :meth:`doc_scores`), -1 when none."""
        return self.results.doc_position(doc_id)

    @property
    def n_docs(self) -> int:
        """Document rows (every segment's, deleted ones included: the row space of :meth:`doc_scores`)."""
        return self.bm25.n_rows

    def doc_mask(self, chunk_mask: np.ndarray) -> np.ndarray:
        """A bool per document row: whether ``chunk_mask`` (a bool per chunk row) keeps a row of it."""
        docs = np.asarray(self.results.doc_rows(np.flatnonzero(chunk_mask)), dtype=np.int64)
        out = np.zeros(self.bm25.n_rows, dtype=bool)
        out[docs[docs >= 0]] = True
        return out

    def evidence(
        self, chunk_rows: list[int], query_tokens: list[str], keep: np.ndarray | None = None
    ) -> tuple[dict[int, int], list[float]]:
        """What :func:`quarry.search.fusion.with_documents` needs for these chunk rows:
        ``(doc_of, doc_scores)``, ``doc_of[row]`` the position in ``doc_scores`` of the row's
        document's card score (-1: none); the last of ``doc_scores`` is the best card score over
        all live documents, so ``max(doc_scores)`` is the query's maximum, as over every card.
        ``keep`` (a bool per document row, :meth:`doc_mask`): only those documents count, for
        their own rows and for the maximum (a document a filter or a caller's permissions leave
        out never moves the scores of the ones returned)."""
        doc_rows = self.results.doc_rows(chunk_rows)
        known = sorted({int(d) for d in doc_rows if d >= 0 and (keep is None or keep[int(d)])})
        scores = self.bm25.exact_scores(query_tokens, np.array(known, dtype=np.int64)).tolist() if known else []
        _, top = self.bm25.search_tokens(query_tokens, 1, keep)
        place = {d: i for i, d in enumerate(known)}
        doc_of = {row: place.get(int(d), -1) for row, d in zip(chunk_rows, doc_rows)}
        return doc_of, scores + [float(top[0]) if len(top) else 0.0]
