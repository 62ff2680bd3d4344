-- Views `quarry sql` adds to its read-only connection (temporary: the catalog itself is unchanged).
-- chunks_full: each chunk with its document's path, type and title and its section's title.
CREATE OR REPLACE TEMP VIEW chunks_full AS
SELECT c.chunk_id, c.doc_id, d.path, d.file_type, d.title, s.title AS section, c.section_index, c.chunk_index,
       c.page_start, c.page_end, c.header, c.text, c.n_tokens, d.mtime, d.metadata
FROM chunks c
JOIN documents d USING (doc_id)
LEFT JOIN sections s USING (doc_id, section_index);

-- sections_full: each section with its document's path and type, and how many chunks it holds.
CREATE OR REPLACE TEMP VIEW sections_full AS
SELECT s.doc_id, d.path, d.file_type, s.section_index, s.title, s.level, s.page_start, s.page_end,
       (SELECT count(*) FROM chunks c WHERE c.doc_id = s.doc_id AND c.section_index = s.section_index) AS n_chunks
FROM sections s
JOIN documents d USING (doc_id);
