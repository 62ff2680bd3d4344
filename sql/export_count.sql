-- How many chunks an export keeps. quarry/export.py replaces the `TRUE /* filter */` marker with a
-- condition from quarry/filters.py (whitelisted columns, `?` placeholders).
SELECT count(*)
FROM chunks c
JOIN documents d ON d.doc_id = c.doc_id
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE TRUE /* filter */;
