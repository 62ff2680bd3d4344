-- The distinct line hashes (chunks.line_hashes) of these documents' chunks ($1: VARCHAR[] of doc ids),
-- each with how many of them hold it: the lines whose boilerplate status a commit that adds,
-- changes or deletes them may flip, and by how many holders at most.
SELECT h, count(DISTINCT doc_id) AS docs FROM (
    SELECT doc_id, unnest(line_hashes) AS h FROM chunks
    WHERE doc_id IN (SELECT unnest($1::VARCHAR[])) AND line_hashes IS NOT NULL
)
GROUP BY h;
