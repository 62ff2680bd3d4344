-- Every chunk inside a set of chunk ranges, in document order.
-- ?1: one range per line, "doc_id first last" (chunk indexes, inclusive), as a single string
-- (a Python list parameter costs DuckDB a failed `import pandas` per element).
WITH ranges AS (
    SELECT split_part(r, ' ', 1) AS doc_id, split_part(r, ' ', 2)::INTEGER AS lo,
           split_part(r, ' ', 3)::INTEGER AS hi
    FROM (SELECT unnest(string_split(?, chr(10))) AS r)
)
SELECT DISTINCT c.doc_id, c.chunk_index, c.chunk_id, c.start_char, c.end_char, c.page_start, c.page_end,
       c.header, c.text, coalesce(s.title, '') AS section
FROM chunks c
JOIN ranges r ON r.doc_id = c.doc_id AND c.chunk_index BETWEEN r.lo AND r.hi
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
ORDER BY c.doc_id, c.chunk_index;
