-- Documents named by another document's `dup_of` / `dup_cluster` that the exporting caller may not
-- read (quarry/search/export.py blanks those values, so an export never reveals that such a
-- document exists). The `TRUE /* filter */` marker takes the export filter's permission clause
-- alone; a document whose principals are NULL is readable by no one.
SELECT d.doc_id
FROM documents d
WHERE d.doc_id IN (SELECT dup_of FROM documents WHERE dup_of IS NOT NULL
                   UNION SELECT dup_cluster FROM documents WHERE dup_cluster IS NOT NULL)
  AND NOT coalesce(TRUE /* filter */, FALSE);
