-- Titled sections of the documents a question set samples (?: their ids), with their chunks' ids:
-- the `headings` method's questions.
SELECT s.doc_id, s.section_index, s.title, s.level, s.page_start, s.page_end,
       list(c.chunk_id ORDER BY c.chunk_index) AS chunk_ids
FROM sections s
JOIN chunks c ON c.doc_id = s.doc_id AND c.section_index = s.section_index
WHERE s.doc_id IN (SELECT unnest(?::VARCHAR[])) AND s.title IS NOT NULL AND s.title <> ''
GROUP BY ALL
ORDER BY s.doc_id, s.section_index;
