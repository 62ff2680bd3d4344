-- Chunks whose boilerplate share a commit recomputes: those of documents $1 (VARCHAR[]: added,
-- changed, moved, or whose duplicate assignment changed) and those holding a line of $2 (BIGINT[]:
-- lines whose status may have flipped), with their root and what stripping reads.
SELECT c.chunk_id, c.doc_id, d.root, c.norm_hash, c.line_hashes, c.boilerplate, c.header, c.text,
       c.search_text, c.text_hash
FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
WHERE c.doc_id IN (SELECT unnest($1::VARCHAR[])) OR list_has_any(c.line_hashes, $2::BIGINT[]);
