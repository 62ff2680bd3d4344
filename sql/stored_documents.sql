-- Which of these documents ($1: VARCHAR[] of doc ids) the catalog holds, with the run that wrote
-- each: the writer deletes (from the catalog and from LanceDB) only what may be there.
SELECT doc_id, run_id FROM documents WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
