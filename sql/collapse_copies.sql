-- Chunks holding the same passage (norm_hash) as a search's hits, of documents the caller's filter
-- keeps (quarry/search/collapse.py); the `TRUE /* filter */` marker takes the search's filter, the
-- permission clause included. ?1: passage hashes, one per line.
SELECT c.chunk_id, c.doc_id, d.path, c.norm_hash
FROM chunks c
JOIN documents d ON d.doc_id = c.doc_id
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE c.norm_hash IN (SELECT unnest(string_split(?::VARCHAR, chr(10))))
  AND TRUE /* filter */
ORDER BY d.path, c.chunk_id;
