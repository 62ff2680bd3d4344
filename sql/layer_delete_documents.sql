-- Remove documents' rows from a delta layer's own tables (rows written earlier in the same run).
-- $1: VARCHAR[] of doc ids. Rows of earlier layers are hidden through layer.owners, never deleted.
DELETE FROM layer.chunks WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
DELETE FROM layer.sections WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
DELETE FROM layer.documents WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
