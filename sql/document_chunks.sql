-- A document's chunks in order: ids and spans, no text. $1 doc_id.
SELECT chunk_id, chunk_index, section_index, start_char, end_char, page_start, page_end, n_tokens
FROM chunks WHERE doc_id = $1 ORDER BY chunk_index;
