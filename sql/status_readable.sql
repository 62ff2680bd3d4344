-- Counts for a caller who reads only some documents. quarry/search/query.py replaces the
-- `TRUE /* filter */` marker with the caller's permission clause (bound parameters).
WITH d AS (SELECT doc_id, size FROM documents d WHERE TRUE /* filter */)
SELECT
    (SELECT count(*) FROM d) AS documents,
    (SELECT count(*) FROM sections s JOIN d USING (doc_id)) AS sections,
    (SELECT count(*) FROM chunks c JOIN d USING (doc_id)) AS chunks,
    (SELECT coalesce(sum(size), 0) FROM d) AS bytes;
