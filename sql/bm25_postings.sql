-- The postings of the BM25 index, in CSC order (by term id, then row id), from the temporary
-- tables sql/bm25_terms.sql makes. Terms sort by their bytes, which the reader's binary search
-- relies on.
SELECT v.term_id, t.row_id, t.tf
FROM bm25_tf t JOIN bm25_vocab v USING (term)
ORDER BY v.term_id, t.row_id;
