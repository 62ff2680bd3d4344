-- The BM25 tokens of every chunk of a segment (quarry/textnorm.py, space-separated), in row order
-- (chunk_id order), for its BM25 files (quarry/retrieval/bm25.py). index_chunks: a temporary view
-- of the table the segment indexes (quarry/retrieval/searchindex.py).
SELECT search_text FROM index_chunks ORDER BY chunk_id;
