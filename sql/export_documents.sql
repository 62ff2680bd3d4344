-- Documents for `quarry export`. ?1: TRUE to export every document; FALSE to export only those
-- holding a chunk the filter keeps. quarry/export.py replaces the `TRUE /* filter */` marker with
-- a condition from quarry/filters.py (whitelisted columns, `?` placeholders after ?1).
SELECT doc_id, path, root, rel_path, file_type, size, mtime, sha256, title, summary, n_pages, n_sections,
       n_chunks, CAST(metadata AS VARCHAR) AS metadata, indexed_at, run_id, path_bytes, principals,
       content_hash, dup_cluster, dup_of, dup_similarity, lang, pii_total
FROM documents
WHERE ? OR doc_id IN (
    SELECT c.doc_id
    FROM chunks c
    JOIN documents d ON d.doc_id = c.doc_id
    LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
    WHERE TRUE /* filter */
);
