-- The BM25 tokens of every chunk (quarry/textnorm.py, space-separated), in row order (chunk_id
-- order), for the BM25 index files (quarry/retrieval/bm25.py).
SELECT search_text FROM chunks ORDER BY chunk_id;
