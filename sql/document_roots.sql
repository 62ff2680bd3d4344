-- The root of each of these documents ($1: VARCHAR[] of doc ids): a move within its root changes no
-- line's holders there (quarry/store/boilerplate.py).
SELECT doc_id, root FROM documents WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
