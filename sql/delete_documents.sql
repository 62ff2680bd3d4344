-- Remove documents with their sections and chunks. $1: VARCHAR[] of doc ids. {schema}: main for
-- a whole catalog; layer for a delta layer's own tables (rows written earlier in the same run:
-- rows of earlier layers are hidden through layer.owners, never deleted).
DELETE FROM {schema}.chunks WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
DELETE FROM {schema}.sections WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
DELETE FROM {schema}.documents WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
