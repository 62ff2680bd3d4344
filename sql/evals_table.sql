-- The evals table `quarry sql` shows: one row per (question set, generation, settings) scored by
-- `quarry eval run` or `quarry eval BEIR_DIR`. Rows live in <store>/evals.jsonl (quarry/store/evals.py),
-- not in a catalog generation; this temporary table is filled from it on the read-only connection.
CREATE OR REPLACE TEMP TABLE evals (
    eval_id    VARCHAR,     -- unique id of the row
    created    TIMESTAMP,   -- when it was scored (UTC)
    set_name   VARCHAR,     -- the question set (or BEIR folder name)
    method     VARCHAR,     -- known-item, headings, llm, mixed, beir
    generation INTEGER,     -- the committed generation scored
    mode       VARCHAR,     -- hybrid, vector, bm25
    k          INTEGER,     -- the cut of recall@k and mrr@k
    questions  INTEGER,     -- questions scored
    recall     DOUBLE,      -- document recall@k
    mrr        DOUBLE,      -- document MRR@k
    settings   JSON,        -- fusion and the store's chunking and model
    metrics    JSON,        -- every figure: recall@k, mrr@k, page_*, chunk_*, ndcg@10 (BEIR)
    judge      JSON,        -- with --answers: judge model, means per criterion, failed judgments
    seconds    DOUBLE,      -- time to score the set
    flagged    VARCHAR      -- why this row falls below the previous generation's by more than the margin
);
