-- Each document's true chunk count, path and title. ?1: doc ids, one per line (a single string:
-- a Python list parameter costs DuckDB a failed `import pandas` per element).
SELECT doc_id, n_chunks, path, title
FROM documents
WHERE doc_id IN (SELECT unnest(string_split(?, chr(10))));
