-- One chunk for GET /v1/chunks/{id} and Index.chunk. ?1 chunk_id. quarry/search/query.py replaces
-- the `TRUE /* filter */` marker with the caller's permission clause (bound parameters).
SELECT c.chunk_id, c.doc_id, d.path, d.title, coalesce(s.title, '') AS section, c.header, c.text,
       c.page_start, c.page_end, c.chunk_index, c.section_index, d.file_type, c.start_char, c.end_char,
       c.n_tokens, d.n_chunks
FROM chunks c
JOIN documents d ON d.doc_id = c.doc_id
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE c.chunk_id = ? AND TRUE /* filter */;
