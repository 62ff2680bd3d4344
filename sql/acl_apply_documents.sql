-- Set principals from the registered Arrow table wanted_acl(doc_id, principals) where they differ; returns the documents changed.
UPDATE documents SET principals = w.principals
FROM wanted_acl w
WHERE documents.doc_id = w.doc_id AND documents.principals IS DISTINCT FROM w.principals
RETURNING documents.doc_id;
