-- The chunks of documents that moved, with the new path (registered Arrow table moved_paths:
-- doc_id, path), for the one LanceDB update of a run's moves (quarry/store/vectors.py).
SELECT c.chunk_id, m.path
FROM chunks c
JOIN moved_paths m USING (doc_id)
ORDER BY c.chunk_id;
