-- Documents a question set may be drawn from (quarry/eval/questions.py): every document with chunks,
-- or, with `--as`, those the principals may read (the `TRUE /* filter */` marker becomes their clause).
SELECT d.doc_id, d.path, d.rel_path, d.file_type, d.title
FROM documents d
WHERE d.n_chunks > 0 AND TRUE /* filter */
ORDER BY d.doc_id;
