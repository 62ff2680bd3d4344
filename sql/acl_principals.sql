-- Each document's principals by path, for a run to compare with what its sources now say.
SELECT path, principals FROM documents;
