-- One document for GET /v1/documents/{id} and Index.document. ?1 doc_id. quarry/search/query.py
-- replaces the `TRUE /* filter */` marker with the caller's permission clause (bound parameters).
SELECT d.doc_id, d.path, d.root, d.rel_path, d.file_type, d.size, d.mtime, d.sha256, d.title, d.summary,
       d.n_pages, d.n_sections, d.n_chunks, CAST(d.metadata AS VARCHAR) AS metadata, d.indexed_at, d.principals
FROM documents d
WHERE d.doc_id = ? AND TRUE /* filter */;
