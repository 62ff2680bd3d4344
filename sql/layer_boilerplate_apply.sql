-- Chunks' boilerplate share (and, stripping, BM25 text and text hash) in a delta layer, from
-- wanted_boilerplate(chunk_id, doc_id, boilerplate, search_text, text_hash; texts NULL:
-- unchanged), once the layer holds those chunks (sql/layer_boilerplate_copy.sql); the text columns
-- only where they change.
UPDATE layer.chunks SET search_text = w.search_text, text_hash = w.text_hash
FROM wanted_boilerplate w WHERE layer.chunks.chunk_id = w.chunk_id AND w.search_text IS NOT NULL;
UPDATE layer.chunks SET boilerplate = w.boilerplate
FROM wanted_boilerplate w WHERE layer.chunks.chunk_id = w.chunk_id;
