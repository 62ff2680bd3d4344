-- Chunks for `quarry export`, with their document's path, type, title and metadata and their
-- section's title. ?1: chunk ids to restrict to, one per line in a single string, or NULL for
-- all (the vector export asks for one LanceDB batch at a time; a Python list parameter would
-- cost DuckDB a failed `import pandas` per element). quarry/export.py replaces the
-- `TRUE /* filter */` marker with a condition from quarry/filters.py (whitelisted columns, `?`
-- placeholders after ?1).
SELECT c.chunk_id, c.doc_id, c.chunk_index, c.section_index, coalesce(s.title, '') AS section, d.path,
       d.file_type, d.title, c.start_char, c.end_char, c.page_start, c.page_end, c.header, c.text,
       c.text_hash, c.n_tokens, CAST(d.metadata AS VARCHAR) AS metadata, d.dup_of, c.norm_hash, c.lang,
       c.pii_email, c.pii_phone, c.pii_card, c.pii_iban, c.pii_national_id, c.pii_secret, c.pii_total,
       c.q_words, c.q_mean_word, c.q_alpha, c.q_dup_lines, c.q_top_2gram, c.q_dup_5gram, c.boilerplate
FROM chunks c
JOIN documents d ON d.doc_id = c.doc_id
LEFT JOIN sections s ON s.doc_id = c.doc_id AND s.section_index = c.section_index
WHERE (?::VARCHAR IS NULL OR c.chunk_id IN (SELECT unnest(string_split(?::VARCHAR, chr(10)))))
  AND TRUE /* filter */;
