-- Set chunks' boilerplate share (and, stripping, their BM25 text and text hash) from
-- wanted_boilerplate(chunk_id, doc_id, boilerplate, search_text, text_hash; texts NULL: unchanged).
-- Two statements: a flag-only update leaves the text columns alone. No RETURNING: it cost 10 s for
-- 100K rows (a first commit), the update itself 0.05 s; sql/boilerplate_wanted_docs.sql names them.
UPDATE chunks SET search_text = w.search_text, text_hash = w.text_hash
FROM wanted_boilerplate w
WHERE chunks.chunk_id = w.chunk_id AND w.search_text IS NOT NULL
  AND (chunks.search_text <> w.search_text OR chunks.text_hash <> w.text_hash);
UPDATE chunks SET boilerplate = w.boilerplate
FROM wanted_boilerplate w
WHERE chunks.chunk_id = w.chunk_id;
