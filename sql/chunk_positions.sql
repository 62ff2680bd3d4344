-- Where chunks sit in their documents, and how many chunks each document has.
-- ?1: chunk ids, one per line (a single string: a Python list parameter costs DuckDB a failed
-- `import pandas` per element).
SELECT c.chunk_id, c.doc_id, c.chunk_index, d.n_chunks, d.path, d.title
FROM chunks c
JOIN documents d USING (doc_id)
WHERE c.chunk_id IN (SELECT unnest(string_split(?, chr(10))));
