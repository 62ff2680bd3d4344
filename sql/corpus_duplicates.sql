-- `quarry corpus report`: duplicates by folder (the first two parts of rel_path under its root):
-- documents, copies (dup_of set), the bytes the copies hold (saved by keeping one of each).
SELECT root, CASE WHEN strpos(rel_path, '/') = 0 THEN '.' ELSE regexp_extract(rel_path, '^([^/]+(/[^/]+)?)/', 1) END AS folder,
       count(*) AS documents, count(dup_of) AS copies, coalesce(sum(size) FILTER (WHERE dup_of IS NOT NULL), 0) AS bytes_saved
FROM documents
GROUP BY ALL
HAVING count(dup_of) > 0
ORDER BY copies DESC, root, folder;
