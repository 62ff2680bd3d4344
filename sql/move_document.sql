-- A file that moved with the same bytes keeps its document, chunks and vectors.
UPDATE documents
SET path = $2, root = $3, rel_path = $4, mtime = $5, run_id = $6, path_bytes = $7
WHERE doc_id = $1;
