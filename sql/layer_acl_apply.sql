-- Principals of a delta layer's documents, by path, from the registered Arrow table
-- wanted_acl(path, principals) where they differ: those documents rows, with their new principals,
-- are written to the layer; chunks and sections stay where they are (as for a move).
-- $1: this layer's generation, $2: the generation's base. Returns the documents changed.
CREATE OR REPLACE TEMP TABLE layer_rewritten AS
SELECT d.* REPLACE (w.principals AS principals)
FROM documents d JOIN wanted_acl w ON d.path = w.path
WHERE d.principals IS DISTINCT FROM w.principals;
DELETE FROM layer.documents WHERE doc_id IN (SELECT doc_id FROM layer_rewritten);
INSERT INTO layer.documents BY NAME SELECT * FROM layer_rewritten;
INSERT OR REPLACE INTO layer.owners
SELECT r.doc_id, $1::INTEGER, CASE WHEN o.doc_id IS NULL THEN $2::INTEGER ELSE o.content_layer END
FROM layer_rewritten r LEFT JOIN layer.owners o USING (doc_id);
SELECT doc_id FROM layer_rewritten ORDER BY doc_id;
DROP TABLE layer_rewritten;
