-- Same bytes, new mtime: only the bookkeeping changes; all of a run at once, from the registered
-- Arrow table touched_documents (doc_id, mtime).
UPDATE documents SET mtime = t.mtime FROM touched_documents t WHERE documents.doc_id = t.doc_id;
