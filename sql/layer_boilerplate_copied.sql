-- The documents of wanted_boilerplate whose sections and chunks an earlier layer holds: a delta
-- layer copies them in before it updates their chunks (sql/layer_boilerplate_copy.sql). $1: this
-- layer's generation, $2: the generation's base.
SELECT DISTINCT w.doc_id FROM wanted_boilerplate w LEFT JOIN layer.owners o ON o.doc_id = w.doc_id
WHERE coalesce(o.content_layer, $2::INTEGER) <> $1::INTEGER
ORDER BY w.doc_id;
