-- The distinct line hashes (chunks.line_hashes) of these documents' chunks ($1: VARCHAR[] of doc ids):
-- the lines whose boilerplate status a commit that adds, changes or deletes them may flip.
SELECT DISTINCT h FROM (
    SELECT unnest(line_hashes) AS h FROM chunks
    WHERE doc_id IN (SELECT unnest($1::VARCHAR[])) AND line_hashes IS NOT NULL
);
