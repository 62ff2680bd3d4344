-- Duplicate assignments of a delta layer's documents from the registered Arrow table
-- wanted_dups(doc_id, dup_cluster, dup_of, dup_similarity) where they differ: those documents rows,
-- with their new assignment, are written to the layer; chunks and sections stay where they are
-- (as for a move). $1: this layer's generation, $2: the generation's base. Returns the documents changed.
CREATE OR REPLACE TEMP TABLE layer_rewritten AS
SELECT d.* REPLACE (w.dup_cluster AS dup_cluster, w.dup_of AS dup_of, w.dup_similarity AS dup_similarity)
FROM documents d JOIN wanted_dups w ON d.doc_id = w.doc_id
WHERE d.dup_cluster IS DISTINCT FROM w.dup_cluster OR d.dup_of IS DISTINCT FROM w.dup_of
   OR d.dup_similarity IS DISTINCT FROM w.dup_similarity;
DELETE FROM layer.documents WHERE doc_id IN (SELECT doc_id FROM layer_rewritten);
INSERT INTO layer.documents BY NAME SELECT * FROM layer_rewritten;
INSERT OR REPLACE INTO layer.owners
SELECT r.doc_id, $1::INTEGER, CASE WHEN o.doc_id IS NULL THEN $2::INTEGER ELSE o.content_layer END
FROM layer_rewritten r LEFT JOIN layer.owners o USING (doc_id);
SELECT doc_id FROM layer_rewritten ORDER BY doc_id;
DROP TABLE layer_rewritten;
