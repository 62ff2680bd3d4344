-- Set chunks' boilerplate share (and, stripping, their BM25 text and text hash) from the registered
-- Arrow table wanted_boilerplate(chunk_id, doc_id, boilerplate, search_text, text_hash; texts NULL:
-- unchanged): rows that differ only. Returns the documents changed.
UPDATE chunks SET boilerplate = w.boilerplate, search_text = coalesce(w.search_text, chunks.search_text),
    text_hash = coalesce(w.text_hash, chunks.text_hash)
FROM wanted_boilerplate w
WHERE chunks.chunk_id = w.chunk_id
  AND (chunks.boilerplate IS DISTINCT FROM w.boilerplate OR chunks.search_text <> w.search_text
       OR chunks.text_hash <> w.text_hash)
RETURNING chunks.doc_id;
