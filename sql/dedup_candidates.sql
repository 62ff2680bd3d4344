-- Candidate duplicate pairs (a, b), a < b: documents sharing an LSH band key (documents.lsh_bands,
-- the near-duplicate index) or the same normalised text; the commit verifies each (quarry/store/dedup.py).
WITH keys AS (
    SELECT doc_id, unnest(lsh_bands) AS k FROM documents WHERE lsh_bands IS NOT NULL
), shared AS (
    SELECT k FROM keys GROUP BY k HAVING count(*) > 1
), banded AS (
    SELECT keys.* FROM keys SEMI JOIN shared USING (k)
)
SELECT DISTINCT a.doc_id, b.doc_id FROM banded a JOIN banded b ON a.k = b.k AND a.doc_id < b.doc_id
UNION
SELECT a.doc_id, b.doc_id FROM documents a JOIN documents b
    ON a.content_hash = b.content_hash AND a.doc_id < b.doc_id
WHERE a.minhash IS NOT NULL AND b.minhash IS NOT NULL;
