-- Copy into a delta layer the sections and chunks of the documents of wanted_boilerplate that an
-- earlier layer holds (their owners' content_layer becomes this layer; their documents row stays
-- where it is), so that sql/layer_boilerplate_apply.sql can update their chunks there. $1: this
-- layer's generation, $2: the generation's base. Returns the documents copied (their rows in
-- earlier search index segments are dead now). Run only when sql/layer_boilerplate_copied.sql
-- finds some: each statement reads the views over every layer.
CREATE OR REPLACE TEMP TABLE layer_copied AS
SELECT DISTINCT w.doc_id FROM wanted_boilerplate w LEFT JOIN layer.owners o ON o.doc_id = w.doc_id
WHERE coalesce(o.content_layer, $2::INTEGER) <> $1::INTEGER;
CREATE OR REPLACE TEMP TABLE layer_copied_sections AS
SELECT * FROM sections WHERE doc_id IN (SELECT doc_id FROM layer_copied);
CREATE OR REPLACE TEMP TABLE layer_copied_chunks AS
SELECT * FROM chunks WHERE doc_id IN (SELECT doc_id FROM layer_copied);
INSERT OR REPLACE INTO layer.owners
SELECT c.doc_id, coalesce(o.doc_layer, $2::INTEGER), $1::INTEGER FROM layer_copied c LEFT JOIN layer.owners o USING (doc_id);
INSERT INTO layer.sections BY NAME SELECT * FROM layer_copied_sections;
INSERT INTO layer.chunks BY NAME SELECT * FROM layer_copied_chunks;
SELECT doc_id FROM layer_copied ORDER BY doc_id;
DROP TABLE layer_copied;
DROP TABLE layer_copied_sections;
DROP TABLE layer_copied_chunks;
