-- The BM25 vocabulary in term id order, and the number of chunks (rows).
SELECT term FROM bm25_vocab ORDER BY term_id;
