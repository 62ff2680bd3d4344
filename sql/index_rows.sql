-- What a search result shows of each chunk, in row order (chunk_id order), for the search
-- index's rows.arrow (quarry/retrieval/rows.py): results are read from there, not from here.
SELECT c.chunk_id, c.doc_id, coalesce(s.title, '') AS section, c.header, c.text, c.page_start, c.page_end,
       c.chunk_index, c.section_index, c.start_char, c.end_char
FROM chunks c
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
ORDER BY c.chunk_id;
