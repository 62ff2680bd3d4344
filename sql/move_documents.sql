-- Files that moved with the same bytes keep their documents, chunks and vectors: all of a run at
-- once, from the registered Arrow table moved_documents (doc_id, path, root, rel_path, mtime,
-- run_id, path_bytes).
UPDATE documents
SET path = m.path, root = m.root, rel_path = m.rel_path, mtime = m.mtime, run_id = m.run_id, path_bytes = m.path_bytes
FROM moved_documents m
WHERE documents.doc_id = m.doc_id;
