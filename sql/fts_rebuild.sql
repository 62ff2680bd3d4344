-- Rebuild the BM25 index over chunks.search_text. search_text is already tokenised by
-- quarry/textnorm.py (lower-case word tokens, numbers and codes kept, compound tokens also
-- split into their parts), so the FTS tokenizer only splits on whitespace: the default
-- ignore pattern would drop every digit.
PRAGMA create_fts_index(
    'chunks', 'chunk_id', 'search_text',
    stemmer = 'porter', stopwords = 'english', ignore = '\s+',
    strip_accents = 1, lower = 1, overwrite = 1
);
