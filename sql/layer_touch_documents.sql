-- Same bytes, new mtime (or a file discovery had to read), all of a run at once (registered Arrow
-- table touched_documents: doc_id, mtime, run_id): the documents rows are written to the layer
-- with the new mtime and the run that read them. $1: this layer's generation, $2: the base.
CREATE OR REPLACE TEMP TABLE layer_rewritten AS
SELECT d.* REPLACE (t.mtime AS mtime, t.run_id AS run_id)
FROM documents d JOIN touched_documents t USING (doc_id);
DELETE FROM layer.documents WHERE doc_id IN (SELECT doc_id FROM layer_rewritten);
INSERT INTO layer.documents BY NAME SELECT * FROM layer_rewritten;
INSERT OR REPLACE INTO layer.owners
SELECT r.doc_id, $1::INTEGER, CASE WHEN o.doc_id IS NULL THEN $2::INTEGER ELSE o.content_layer END
FROM layer_rewritten r LEFT JOIN layer.owners o USING (doc_id);
DROP TABLE layer_rewritten;
