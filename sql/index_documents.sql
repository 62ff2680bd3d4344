-- What a search result shows of each document, by doc_id, for the search index's docs.arrow
-- (quarry/retrieval/rows.py); rewritten at every commit, since a move changes only paths.
SELECT doc_id, path, title, file_type FROM documents ORDER BY doc_id;
