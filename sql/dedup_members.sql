-- What the duplicate clustering reads of documents: those in candidate pairs ($1) and those in a
-- cluster now (their assignment may have to be cleared).
SELECT doc_id, path, mtime, content_hash, minhash, dup_cluster, dup_of, dup_similarity
FROM documents
WHERE doc_id IN (SELECT unnest($1::VARCHAR[])) OR dup_cluster IS NOT NULL;
