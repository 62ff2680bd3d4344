-- What the planner compares discovered files against. path_bytes: the exact name when it is
-- not valid UTF-8 (quarry/paths.py), else NULL.
SELECT doc_id, path, root, sha256, mtime, size, path_bytes FROM documents;
