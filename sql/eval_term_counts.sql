-- Collection statistics of the known-item method: the chunk texts of every document a question set
-- may be drawn from (the `TRUE /* filter */` marker: `--as` principals' clause), streamed.
SELECT c.doc_id, c.text
FROM chunks c
JOIN documents d ON d.doc_id = c.doc_id
WHERE TRUE /* filter */;
