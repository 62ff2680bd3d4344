-- Chunks whose boilerplate share a commit recomputes: those of documents $1 (VARCHAR[]: added,
-- changed, moved, or whose duplicate assignment changed) and those holding a line of $2 (BIGINT[]:
-- lines whose status may have flipped), with their root and what stripping reads.
WITH l AS (
    SELECT chunk_id, unnest(line_hashes) AS h FROM chunks WHERE line_hashes IS NOT NULL
), flipped AS (
    SELECT DISTINCT l.chunk_id FROM l SEMI JOIN (SELECT unnest($2::BIGINT[]) AS h) w ON l.h = w.h
)
SELECT c.chunk_id, c.doc_id, d.root, c.norm_hash, c.line_hashes, c.boilerplate, c.header, c.text,
       c.search_text, c.text_hash
FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
WHERE c.doc_id IN (SELECT unnest($1::VARCHAR[])) OR c.chunk_id IN (SELECT chunk_id FROM flipped);
