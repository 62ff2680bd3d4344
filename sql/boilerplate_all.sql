-- Every chunk's boilerplate share from scratch (the first commit of a store or of a catalog from
-- before the column, and `quarry maintain`): a line of 20+ characters is boilerplate in a root when
-- at least max($1, ceil($2 x n)) of the root's n documents hold it, copies (dup_of set) not
-- counted. Returns the chunks whose share differs from the stored one or that hold boilerplate
-- (or held it, when $3: whether the BM25 and embedded texts are checked too; they are read only then), with their boilerplate lines and what stripping reads.
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
SELECT w.chunk_id, w.doc_id, w.share, w.boiler,
       CASE WHEN t.texts THEN c.header END, CASE WHEN t.texts THEN c.text END,
       CASE WHEN t.texts THEN c.search_text END, CASE WHEN t.texts THEN c.text_hash END, w.stored
FROM wanted w JOIN chunks c ON c.chunk_id = w.chunk_id,
     LATERAL (SELECT $3::BOOLEAN AND (w.share > 0 OR w.stored > 0) AS texts) t
WHERE w.share IS DISTINCT FROM w.stored OR t.texts;
