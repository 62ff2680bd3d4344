-- BM25 top-k. $1: query already tokenised by quarry/textnorm.py, $2: k.
SELECT chunk_id, score
FROM (
    SELECT chunk_id, fts_main_chunks.match_bm25(chunk_id, $1) AS score
    FROM chunks
)
WHERE score IS NOT NULL
ORDER BY score DESC, chunk_id
LIMIT $2;
