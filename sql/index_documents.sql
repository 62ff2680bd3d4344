-- What a search result shows of each document of a segment, by doc_id, for its docs.arrow
-- (quarry/retrieval/rows.py). index_documents: a temporary view of the table the segment indexes.
SELECT doc_id, path, title, file_type FROM index_documents ORDER BY doc_id;
