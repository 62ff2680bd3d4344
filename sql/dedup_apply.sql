-- Set duplicate assignments from the registered Arrow table wanted_dups(doc_id, dup_cluster, dup_of,
-- dup_similarity) where they differ; returns the documents changed. No chunk or vector changes.
UPDATE documents SET dup_cluster = w.dup_cluster, dup_of = w.dup_of, dup_similarity = w.dup_similarity
FROM wanted_dups w
WHERE documents.doc_id = w.doc_id
  AND (documents.dup_cluster IS DISTINCT FROM w.dup_cluster OR documents.dup_of IS DISTINCT FROM w.dup_of
       OR documents.dup_similarity IS DISTINCT FROM w.dup_similarity)
RETURNING documents.doc_id;
