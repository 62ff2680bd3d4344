-- `quarry corpus report`: totals over documents and chunks (NULL signals: indexed before they existed).
SELECT (SELECT count(*) FROM documents) AS documents,
       (SELECT count(*) FROM documents WHERE minhash IS NULL) AS documents_without_signals,
       (SELECT count(*) FROM documents WHERE dup_of IS NOT NULL) AS copies,
       (SELECT count(DISTINCT dup_cluster) FROM documents) AS clusters,
       (SELECT coalesce(sum(size), 0) FROM documents WHERE dup_of IS NOT NULL) AS bytes_saved,
       (SELECT coalesce(sum(size), 0) FROM documents) AS bytes,
       (SELECT count(*) FROM chunks) AS chunks,
       (SELECT count(*) FROM chunks WHERE pii_total > 0) AS chunks_with_pii;
