-- Every chunk's boilerplate share from scratch (the first commit of a store or of a catalog from
-- before the column, another QUARRY_BOILERPLATE, and `quarry maintain`) into the temporary table
-- boilerplate_all: a line of 20+ characters is boilerplate in a root when at least max($1, ceil($2
-- x n)) of the root's n documents hold it, copies (dup_of set) not counted. It holds the chunks
-- whose share differs from the stored one, and with $3 (texts may change) those that hold
-- boilerplate or held it, with their boilerplate lines.
CREATE OR REPLACE TEMP TABLE boilerplate_all AS
WITH docs AS (
    SELECT root, count(*) AS n FROM documents WHERE dup_of IS NULL GROUP BY root
), lines AS (
    SELECT d.root, c.doc_id, unnest(c.line_hashes) AS h
    FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
    WHERE d.dup_of IS NULL AND c.line_hashes IS NOT NULL
), common AS (
    SELECT l.root, l.h FROM lines l JOIN docs USING (root)
    GROUP BY l.root, l.h, docs.n
    HAVING count(DISTINCT l.doc_id) >= greatest($1::INTEGER, ceil($2::DOUBLE * docs.n))
), flat AS (
    SELECT c.chunk_id, d.root, unnest(c.line_hashes) AS h
    FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
    WHERE c.line_hashes IS NOT NULL
), boiler AS (
    SELECT f.chunk_id, list(f.h) AS lines FROM flat f JOIN common USING (root, h) GROUP BY f.chunk_id
), wanted AS (
    SELECT c.chunk_id, c.doc_id, c.boilerplate AS stored, b.lines AS boiler,
           CASE WHEN c.norm_hash IS NULL THEN NULL
                ELSE coalesce(len(b.lines) / nullif(len(c.line_hashes), 0), 0)::DOUBLE END AS share
    FROM chunks c LEFT JOIN boiler b ON b.chunk_id = c.chunk_id
)
SELECT chunk_id, doc_id, share, boiler, stored FROM wanted
WHERE share IS DISTINCT FROM stored OR ($3::BOOLEAN AND (share > 0 OR stored > 0));
