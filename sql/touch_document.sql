-- Same bytes, new mtime: only the bookkeeping changes.
UPDATE documents SET mtime = $2 WHERE doc_id = $1;
