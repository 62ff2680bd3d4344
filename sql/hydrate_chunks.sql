-- Full result rows for a list of chunk ids. $1: VARCHAR[] of chunk ids.
SELECT c.chunk_id, c.doc_id, d.path, d.title, coalesce(s.title, '') AS section,
       c.header, c.text, c.page_start, c.page_end, c.chunk_index, c.section_index,
       d.file_type, c.start_char, c.end_char
FROM chunks c
JOIN documents d USING (doc_id)
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE c.chunk_id IN (SELECT unnest($1::VARCHAR[]));
