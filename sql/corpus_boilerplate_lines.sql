-- `quarry corpus report`: boilerplate per root, for a catalog from before chunks.boilerplate (the
-- chunks mostly boilerplate counted from their lines; sql/corpus_boilerplate.sql reads the column). A line (chunks.line_hashes: its normalised text of
-- 20+ characters) is boilerplate in a root when at least max($1, ceil($2 x the root's documents))
-- documents of the root hold it, copies (dup_of set) not counted. Per root: documents, distinct
-- boilerplate lines, the share of line occurrences that are boilerplate, and the chunks whose
-- lines are at least half boilerplate.
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
), flagged AS (
    SELECT l.root, l.chunk_id, count(*) AS lines, count(common.h) AS boiler
    FROM lines l LEFT JOIN common ON common.root = l.root AND common.h = l.h
    GROUP BY l.root, l.chunk_id
)
SELECT docs.root, docs.n AS documents,
       (SELECT count(*) FROM common WHERE common.root = docs.root) AS boilerplate_lines,
       coalesce(sum(f.boiler) / nullif(sum(f.lines), 0), 0) AS line_share,
       count(f.chunk_id) FILTER (WHERE f.boiler * 2 >= f.lines AND f.boiler > 0) AS boilerplate_chunks
FROM docs LEFT JOIN flagged f ON f.root = docs.root
GROUP BY docs.root, docs.n
ORDER BY docs.root;
