-- Documents per root that count for boilerplate (copies, dup_of set, not counted).
SELECT root, count(*) FILTER (WHERE dup_of IS NULL) AS n FROM documents GROUP BY root;
