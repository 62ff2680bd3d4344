-- Chunks' boilerplate share (and, stripping, BM25 text and text hash) in a delta layer, from the
-- registered Arrow table wanted_boilerplate(chunk_id, doc_id, boilerplate, search_text, text_hash; texts
-- NULL: unchanged):
-- a document whose sections and chunks an earlier layer holds has them copied into this one first
-- (its owners' content_layer becomes this layer; its documents row stays where it is), then the
-- layer's chunks are updated. $1: this layer's generation, $2: the generation's base. Returns the
-- documents copied (their rows in earlier search index segments are dead now).
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
UPDATE layer.chunks SET boilerplate = w.boilerplate, search_text = coalesce(w.search_text, layer.chunks.search_text),
    text_hash = coalesce(w.text_hash, layer.chunks.text_hash)
FROM wanted_boilerplate w WHERE layer.chunks.chunk_id = w.chunk_id;
SELECT doc_id FROM layer_copied ORDER BY doc_id;
DROP TABLE layer_copied;
DROP TABLE layer_copied_sections;
DROP TABLE layer_copied_chunks;
