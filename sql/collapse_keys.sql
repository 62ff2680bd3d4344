-- What search collapse reads of its hits (quarry/search/collapse.py): each chunk's passage identity
-- and its document's duplicate cluster. ?1: chunk ids, one per line.
SELECT c.chunk_id, c.norm_hash, d.dup_cluster
FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
WHERE c.chunk_id IN (SELECT unnest(string_split(?::VARCHAR, chr(10))));
