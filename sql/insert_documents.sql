-- Bulk insert from registered Arrow tables new_documents, new_sections, new_chunks.
INSERT INTO documents BY NAME SELECT * FROM new_documents;
INSERT INTO sections BY NAME SELECT * FROM new_sections;
INSERT INTO chunks BY NAME SELECT * FROM new_chunks;
