-- Rows computed in Python (the registered Arrow table boilerplate_rows) into wanted_boilerplate.
INSERT INTO wanted_boilerplate SELECT chunk_id, doc_id, boilerplate, search_text, text_hash FROM boilerplate_rows;
