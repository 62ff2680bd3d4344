-- What a search result shows of each chunk of a segment, in row order (chunk_id order), for its
-- rows.arrow (quarry/retrieval/rows.py): results are read from there, not from here. index_chunks,
-- index_sections: temporary views of the tables the segment indexes (quarry/retrieval/searchindex.py).
SELECT c.chunk_id, c.doc_id, coalesce(s.title, '') AS section, c.header, c.text, c.page_start, c.page_end,
       c.chunk_index, c.section_index, c.start_char, c.end_char
FROM index_chunks c
LEFT JOIN index_sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
ORDER BY c.chunk_id;
