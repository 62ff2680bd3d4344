-- Sections for `quarry export`. ?1: TRUE to export every section; FALSE to export only those
-- holding a chunk the filter keeps. quarry/export.py replaces the `TRUE /* filter */` marker with
-- a condition from quarry/filters.py (whitelisted columns, `?` placeholders after ?1).
SELECT sec.doc_id, sec.section_index, sec.title, sec.level, sec.start_char, sec.end_char, sec.page_start,
       sec.page_end, sec.summary
FROM sections sec
WHERE ? OR EXISTS (
    SELECT 1
    FROM chunks c
    JOIN documents d ON d.doc_id = c.doc_id
    LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
    WHERE c.doc_id = sec.doc_id AND c.section_index = sec.section_index AND TRUE /* filter */
);
