-- A delta layer's own rows, from registered Arrow tables new_documents, new_sections, new_chunks.
INSERT INTO layer.documents BY NAME SELECT * FROM new_documents;
INSERT INTO layer.sections BY NAME SELECT * FROM new_sections;
INSERT INTO layer.chunks BY NAME SELECT * FROM new_chunks;
