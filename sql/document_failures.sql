-- Runs since a document was indexed that failed to read its file again (the stored version stays
-- searchable). $1 path, $2 indexed_at. Newest first.
SELECT r.run_id, r.started, e.error
FROM runs r, unnest(from_json(r.errors, '[{"path": "VARCHAR", "error": "VARCHAR"}]')) AS t(e)
WHERE e.path = $1 AND r.started >= $2
ORDER BY r.started DESC
LIMIT 20;
