-- Documents a question set may be drawn from (quarry/eval/questions.py): every document with chunks,
-- or, with `--as`, those the principals may read (the `TRUE /* filter */` marker becomes their clause).
-- In relative-path order, not id order: ids hash the absolute path, so the same tree indexed elsewhere
-- would otherwise be sampled in another order and give other questions for the same seed.
SELECT d.doc_id, d.path, d.rel_path, d.file_type, d.title
FROM documents d
WHERE d.n_chunks > 0 AND TRUE /* filter */
ORDER BY d.rel_path, d.path, d.doc_id;
