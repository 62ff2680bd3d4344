-- Same bytes, new mtime (or a file discovery had to read to know it unchanged): only the bookkeeping
-- changes, the row then names the run that read it; all of a run at once, from the registered Arrow
-- table touched_documents (doc_id, mtime, run_id).
UPDATE documents SET mtime = t.mtime, run_id = t.run_id FROM touched_documents t WHERE documents.doc_id = t.doc_id;
