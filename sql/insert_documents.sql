-- Bulk insert from registered Arrow tables new_documents, new_sections, new_chunks: into a whole
-- catalog ({schema} = main) or a delta layer's own tables (layer).
INSERT INTO {schema}.documents BY NAME SELECT * FROM new_documents;
INSERT INTO {schema}.sections BY NAME SELECT * FROM new_sections;
INSERT INTO {schema}.chunks BY NAME SELECT * FROM new_chunks;
