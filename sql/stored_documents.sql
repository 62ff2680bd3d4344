-- Which of these documents ($1: VARCHAR[] of doc ids) the catalog holds; with $2 (VARCHAR[] of run
-- ids) not NULL, only those these runs wrote. The writer deletes from LanceDB only what this may hold.
SELECT doc_id FROM documents
WHERE doc_id IN (SELECT unnest($1::VARCHAR[])) AND ($2::VARCHAR[] IS NULL OR list_contains($2::VARCHAR[], run_id));
