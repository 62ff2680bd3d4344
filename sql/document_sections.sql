-- A document's sections in order. $1 doc_id.
SELECT section_index, title, level, start_char, end_char, page_start, page_end, summary
FROM sections WHERE doc_id = $1 ORDER BY section_index;
