-- `quarry corpus report`: chunks and documents per language (of the chunk; NULL: no signals).
SELECT coalesce(c.lang, '?') AS lang, count(*) AS chunks, count(DISTINCT c.doc_id) AS documents
FROM chunks c
GROUP BY ALL
ORDER BY chunks DESC, lang;
