-- Per root, how many documents (copies, dup_of set, not counted) hold each of the lines $1 (BIGINT[]):
-- one scan of chunks.line_hashes that keeps only the chunks holding one of them.
WITH hits AS (
    SELECT c.doc_id, c.line_hashes FROM chunks c WHERE list_has_any(c.line_hashes, $1::BIGINT[])
)
SELECT d.root, l.h, count(DISTINCT l.doc_id) AS holders
FROM (SELECT doc_id, unnest(line_hashes) AS h FROM hits) l
JOIN documents d ON d.doc_id = l.doc_id
WHERE d.dup_of IS NULL AND list_contains($1::BIGINT[], l.h)
GROUP BY d.root, l.h;
