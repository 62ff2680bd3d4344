-- The chunks of boilerplate_all (sql/boilerplate_all.sql) whose BM25 and embedded texts may change
-- (they hold boilerplate, or held it), with what stripping reads.
SELECT b.chunk_id, b.doc_id, b.share, b.boiler, c.header, c.text, c.search_text, c.text_hash, b.stored
FROM boilerplate_all b JOIN chunks c ON c.chunk_id = b.chunk_id
WHERE b.share > 0 OR b.stored > 0;
