-- Remove documents with their sections and chunks. $1: VARCHAR[] of doc ids.
DELETE FROM chunks WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
DELETE FROM sections WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
DELETE FROM documents WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
