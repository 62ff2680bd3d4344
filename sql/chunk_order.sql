-- Chunk ids in row order (chunk_id order), the order of every search index file.
SELECT chunk_id FROM chunks ORDER BY chunk_id;
