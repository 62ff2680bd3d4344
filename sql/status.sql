-- Counts for `quarry status`.
SELECT
    (SELECT count(*) FROM documents) AS documents,
    (SELECT count(*) FROM sections) AS sections,
    (SELECT count(*) FROM chunks) AS chunks,
    (SELECT coalesce(sum(size), 0) FROM documents) AS bytes;
