-- Chunks of the documents a question set samples (?: their ids), in document order.
SELECT c.doc_id, c.chunk_id, c.chunk_index, c.section_index, c.page_start, c.page_end, c.text
FROM chunks c
WHERE c.doc_id IN (SELECT unnest(?::VARCHAR[]))
ORDER BY c.doc_id, c.chunk_index;
