-- Row ids of the chunks a search filter keeps. A row id is the chunk's position in chunk_id
-- order, the order of the search index files (quarry/retrieval/). quarry/filters.py replaces
-- the `TRUE /* filter */` marker with a condition built from whitelisted column expressions and
-- `?` placeholders only: every value is a bound parameter, never SQL text.
SELECT c.row_id
FROM (SELECT chunk_id, doc_id, section_index, chunk_index, start_char, end_char, page_start, page_end,
             header, text, text_hash, n_tokens,
             (row_number() OVER (ORDER BY chunk_id) - 1)::INTEGER AS row_id
      FROM chunks) c
JOIN documents d ON d.doc_id = c.doc_id
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE TRUE /* filter */
ORDER BY c.row_id;
