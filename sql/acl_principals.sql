-- The documents whose principals are not exactly public (NULL: not decided yet), by path: a run
-- compares these, and the paths of all documents, with what its sources now say.
SELECT path, principals FROM documents WHERE principals IS DISTINCT FROM ['public'];
