-- Files that moved with the same bytes, all of a run at once: their documents rows, with the new
-- path, root, rel_path, mtime, run and path bytes (registered Arrow table moved_documents), are
-- written to the layer; chunks and sections stay where they are. $1: this layer's generation,
-- $2: the generation's base (the layer of a document layer.owners does not list).
CREATE OR REPLACE TEMP TABLE layer_rewritten AS
SELECT d.* REPLACE (m.path AS path, m.root AS root, m.rel_path AS rel_path, m.mtime AS mtime, m.run_id AS run_id,
                    m.path_bytes AS path_bytes)
FROM documents d JOIN moved_documents m USING (doc_id);
DELETE FROM layer.documents WHERE doc_id IN (SELECT doc_id FROM layer_rewritten);
INSERT INTO layer.documents BY NAME SELECT * FROM layer_rewritten;
INSERT OR REPLACE INTO layer.owners
SELECT r.doc_id, $1::INTEGER, CASE WHEN o.doc_id IS NULL THEN $2::INTEGER ELSE o.content_layer END
FROM layer_rewritten r LEFT JOIN layer.owners o USING (doc_id);
DROP TABLE layer_rewritten;
