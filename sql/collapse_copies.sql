-- Chunks holding the same passage (norm_hash) as a search's hits, of documents the caller's filter
-- keeps (quarry/search/collapse.py); the `TRUE /* filter */` marker takes the search's filter, the
-- permission clause included. ?1: passage hashes, one per line; the last parameter: the most rows
-- per hash (a licence header in thousands of files lists a few); `total`: every such chunk of the hash.
SELECT c.chunk_id, c.doc_id, d.path, c.norm_hash, count(*) OVER (PARTITION BY c.norm_hash) AS total
FROM chunks c
JOIN documents d ON d.doc_id = c.doc_id
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE c.norm_hash IN (SELECT unnest(string_split(?::VARCHAR, chr(10))))
  AND TRUE /* filter */
QUALIFY row_number() OVER (PARTITION BY c.norm_hash ORDER BY d.path, c.chunk_id) <= ?
ORDER BY d.path, c.chunk_id;
