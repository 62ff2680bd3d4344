-- Row ids of the chunks a search filter keeps. chunk_rows: a temporary view of the live chunks
-- numbered as the search index numbers them (segment after segment, chunk_id order within each;
-- quarry/store/layers.py:chunk_rows_sql). quarry/filters.py replaces the `TRUE /* filter */` marker
-- with a condition built from whitelisted column expressions and `?` placeholders only: every
-- value is a bound parameter, never SQL text.
SELECT c.row_id
FROM chunk_rows c
JOIN documents d ON d.doc_id = c.doc_id
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE TRUE /* filter */
ORDER BY c.row_id;
