-- The chunks search collapse can fold (quarry/search/collapse.py), read once per committed
-- generation: those whose passage (norm_hash) another chunk holds too, and those of documents in a
-- duplicate cluster. Any other hit stands alone, so a search reads nothing more for it.
WITH repeated AS (
    SELECT norm_hash FROM chunks WHERE norm_hash IS NOT NULL GROUP BY norm_hash HAVING count(*) > 1
)
SELECT c.chunk_id, c.norm_hash, d.dup_cluster
FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
WHERE c.norm_hash IN (SELECT norm_hash FROM repeated) OR d.dup_cluster IS NOT NULL;
