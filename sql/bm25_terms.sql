-- Term counts for the BM25 index files (quarry/retrieval/bm25.py), in two temporary tables.
-- A row id is the chunk's position in chunk_id order. search_text is already tokenised by
-- quarry/textnorm.py; stop words ($1: VARCHAR[]) are dropped before stemming, as DuckDB's FTS
-- does, and the Porter stemmer is DuckDB's own stem(), which the query side also uses.
CREATE OR REPLACE TEMP TABLE bm25_tf AS
WITH docs AS (
    SELECT (row_number() OVER (ORDER BY chunk_id) - 1)::INTEGER AS row_id, search_text FROM chunks
),
toks AS (
    SELECT row_id, unnest(string_split(search_text, ' ')) AS tok FROM docs
),
vocab AS (
    SELECT tok, stem(tok, 'porter') AS term
    FROM (SELECT DISTINCT tok FROM toks)
    WHERE tok <> '' AND tok NOT IN (SELECT unnest($1::VARCHAR[]))
)
SELECT v.term, t.row_id, count(*)::INTEGER AS tf
FROM toks t JOIN vocab v USING (tok)
GROUP BY v.term, t.row_id;

CREATE OR REPLACE TEMP TABLE bm25_vocab AS
SELECT term, (row_number() OVER (ORDER BY term) - 1)::INTEGER AS term_id
FROM (SELECT DISTINCT term FROM bm25_tf);
