-- `quarry corpus report`: boilerplate per root. A line (chunks.line_hashes: its normalised text of
-- 20+ characters) is boilerplate in a root when at least max($1, ceil($2 x the root's documents))
-- documents of the root hold it, copies (dup_of set) not counted. Per root: documents, distinct
-- boilerplate lines, the share of line occurrences that are boilerplate, and the chunks whose
-- lines are at least half boilerplate (chunks.boilerplate >= 0.5, kept by each commit).
WITH docs AS (
    SELECT root, count(*) AS n FROM documents WHERE dup_of IS NULL GROUP BY root
), lines AS (
    SELECT d.root, c.chunk_id, c.doc_id, unnest(c.line_hashes) AS h
    FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
    WHERE d.dup_of IS NULL AND c.line_hashes IS NOT NULL
), common AS (
    SELECT l.root, l.h FROM lines l JOIN docs USING (root)
    GROUP BY l.root, l.h, docs.n
    HAVING count(DISTINCT l.doc_id) >= greatest($1::INTEGER, ceil($2::DOUBLE * docs.n))
), occurrences AS (
    SELECT l.root, count(*) AS lines, count(common.h) AS boiler
    FROM lines l LEFT JOIN common ON common.root = l.root AND common.h = l.h
    GROUP BY l.root
), flagged AS (
    SELECT d.root, count(*) AS chunks
    FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
    WHERE d.dup_of IS NULL AND c.boilerplate >= 0.5
    GROUP BY d.root
)
SELECT docs.root, docs.n AS documents,
       (SELECT count(*) FROM common WHERE common.root = docs.root) AS boilerplate_lines,
       coalesce(o.boiler / nullif(o.lines, 0), 0) AS line_share,
       coalesce(f.chunks, 0) AS boilerplate_chunks
FROM docs LEFT JOIN occurrences o ON o.root = docs.root LEFT JOIN flagged f ON f.root = docs.root
ORDER BY docs.root;
