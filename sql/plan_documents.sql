-- What the planner compares discovered files against.
SELECT doc_id, path, root, sha256, mtime, size FROM documents;
