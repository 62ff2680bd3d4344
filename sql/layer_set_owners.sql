-- Record which layer now holds documents' rows. $1: VARCHAR[] of doc ids; $2: the layer of their
-- documents row, $3: the layer of their sections and chunks (NULL and NULL: deleted).
INSERT OR REPLACE INTO layer.owners
SELECT unnest($1::VARCHAR[]) AS doc_id, $2::INTEGER AS doc_layer, $3::INTEGER AS content_layer;
