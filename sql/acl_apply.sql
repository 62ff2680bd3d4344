-- Set principals from the registered Arrow table wanted_acl(path, principals) where they differ; returns the documents changed.
-- Only the permissions change: no chunk, vector or search index row is touched.
UPDATE documents SET principals = w.principals
FROM wanted_acl w
WHERE documents.path = w.path AND documents.principals IS DISTINCT FROM w.principals
RETURNING documents.doc_id;
