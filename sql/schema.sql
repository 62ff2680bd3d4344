-- The catalog schema. Applied to every new catalog; statements are idempotent.
CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS documents (
    doc_id     VARCHAR PRIMARY KEY,
    path       VARCHAR NOT NULL,   -- absolute path of the file; bytes that are not UTF-8 as \xNN
    root       VARCHAR NOT NULL,   -- the indexed root the file was found under
    rel_path   VARCHAR NOT NULL,   -- path relative to root
    file_type  VARCHAR NOT NULL,   -- md, txt, rst, html, pdf, docx
    size       BIGINT NOT NULL,
    mtime      TIMESTAMP NOT NULL,
    sha256     VARCHAR NOT NULL,
    title      VARCHAR NOT NULL,
    summary    VARCHAR NOT NULL,
    n_pages    INTEGER,
    n_sections INTEGER NOT NULL,
    n_chunks   INTEGER NOT NULL,
    metadata   JSON,
    indexed_at TIMESTAMP NOT NULL,
    run_id     VARCHAR NOT NULL,
    path_bytes BLOB,               -- the exact bytes of path when it is not valid UTF-8, else NULL
    principals VARCHAR[],          -- who may read it (quarry/core/principals.py); NULL (no one) until the run sets it
    page_offsets INTEGER[],        -- where page i + 1 starts in the parsed text (paged formats; NULL: none or unknown)
    ocr_page_numbers INTEGER[],    -- 1-based pages whose text OCR read
    warnings VARCHAR[],            -- what the parser could not read and chunks the model reads only the start of
    -- corpus signals (docs/corpus.md; quarry/retrieval/corpus/): NULL for documents indexed before they existed
    content_hash VARCHAR,          -- sha256 of the normalised text: equal for exact copies
    minhash BLOB,                  -- MinHash signature of its word 4-grams (128 x uint32, little-endian)
    lsh_bands BIGINT[],            -- its 20 LSH band keys: the near-duplicate index (quarry/store/dedup.py)
    dup_cluster VARCHAR,           -- doc_id of the canonical member of its duplicate cluster (NULL: no copy)
    dup_of VARCHAR,                -- doc_id of the canonical copy it duplicates (NULL: unique, or the canonical)
    dup_similarity DOUBLE,         -- estimated Jaccard similarity to that copy (1.0: the same normalised text)
    lang VARCHAR,                  -- ISO 639-1 language code of the text (und: too little text)
    pii_total INTEGER              -- personal data and secrets found in its chunks (counts, never values)
);

CREATE TABLE IF NOT EXISTS sections (
    doc_id        VARCHAR NOT NULL,
    section_index INTEGER NOT NULL,
    title         VARCHAR NOT NULL,
    level         INTEGER NOT NULL,
    start_char    INTEGER NOT NULL,
    end_char      INTEGER NOT NULL,
    page_start    INTEGER,
    page_end      INTEGER,
    summary       VARCHAR,
    PRIMARY KEY (doc_id, section_index)
);

CREATE TABLE IF NOT EXISTS chunks (
    chunk_id      VARCHAR PRIMARY KEY,
    doc_id        VARCHAR NOT NULL,
    section_index INTEGER NOT NULL,
    chunk_index   INTEGER NOT NULL,    -- position within the document, from 0
    start_char    INTEGER NOT NULL,    -- [start_char, end_char) in the parsed document text
    end_char      INTEGER NOT NULL,
    page_start    INTEGER,             -- 1-based, PDF only
    page_end      INTEGER,
    header        VARCHAR NOT NULL,    -- contextual header, embedded and BM25-indexed with the text
    text          VARCHAR NOT NULL,
    text_hash     VARCHAR NOT NULL,    -- sha256 of header + "\n\n" + text: the vector cache key
    n_tokens      INTEGER NOT NULL,
    search_text   VARCHAR NOT NULL,    -- header + text as BM25 tokens (see quarry/textnorm.py)
    -- corpus signals of the text (docs/corpus.md): NULL for chunks indexed before they existed
    norm_hash     VARCHAR,             -- first 16 hex of sha256 of the normalised text: the passage's identity
    line_hashes   BIGINT[],            -- hashes of its distinct lines of 20+ characters: boilerplate counts them
    lang          VARCHAR,             -- ISO 639-1 language code (und: too little text)
    pii_email     INTEGER,             -- personal data and secrets by kind: counts, never the values
    pii_phone     INTEGER,
    pii_card      INTEGER,
    pii_iban      INTEGER,
    pii_national_id INTEGER,
    pii_secret    INTEGER,
    pii_total     INTEGER,
    q_words       INTEGER,             -- quality signals (quarry/retrieval/corpus/quality.py has the formulas)
    q_mean_word   DOUBLE,
    q_alpha       DOUBLE,
    q_dup_lines   DOUBLE,
    q_top_2gram   DOUBLE,
    q_dup_5gram   DOUBLE,
    boilerplate   DOUBLE               -- share of its line_hashes that are boilerplate in its root (docs/corpus.md)
);

CREATE TABLE IF NOT EXISTS runs (
    run_id          VARCHAR PRIMARY KEY,
    started         TIMESTAMP NOT NULL,
    finished        TIMESTAMP,
    status          VARCHAR NOT NULL,  -- completed, partial, skipped (store busy), refused (deletion guard), rollback
    roots           JSON NOT NULL,
    added           INTEGER NOT NULL DEFAULT 0,
    updated         INTEGER NOT NULL DEFAULT 0,
    moved           INTEGER NOT NULL DEFAULT 0,
    deleted         INTEGER NOT NULL DEFAULT 0,
    skipped         INTEGER NOT NULL DEFAULT 0,
    unsupported     INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    chunks          INTEGER NOT NULL DEFAULT 0,
    embedded_chunks INTEGER NOT NULL DEFAULT 0,
    reused_vectors  INTEGER NOT NULL DEFAULT 0,
    model_calls     INTEGER NOT NULL DEFAULT 0,
    truncated       INTEGER NOT NULL DEFAULT 0,
    errors          JSON NOT NULL,     -- [{"path", "error"}]
    durations       JSON NOT NULL,     -- {stage: {seconds, rows, rows_per_s}} and total (quarry.core.models.StageClock)
    settings        JSON NOT NULL,     -- the run's settings, secrets masked
    llm_calls             INTEGER DEFAULT 0,  -- chat requests sent (retries included)
    llm_prompt_tokens     INTEGER DEFAULT 0,
    llm_completion_tokens INTEGER DEFAULT 0,
    llm_cached            INTEGER DEFAULT 0,  -- answers replayed from <store>/llm-cache.sqlite
    llm_fallback_windows  JSON DEFAULT '[]',  -- [{"path", "kind", "window", "error"}] done by local rules
    ocr_pages             INTEGER DEFAULT 0,  -- PDF pages and images read by OCR
    ocr_seconds           DOUBLE DEFAULT 0,   -- time spent in OCR (render + recognise), summed over workers
    runner                VARCHAR DEFAULT '', -- task runner of the run's batches: threads, processes, dask, ray
    unsupported_files     JSON DEFAULT '[]',  -- [{"path", "reason"}] of files quarry does not read (the first 1,000)
    message               VARCHAR DEFAULT '', -- why a run was skipped or refused; what a rollback did
    permissions_updated   INTEGER DEFAULT 0   -- documents whose principals this run changed (quarry/ingest/acl.py)
);

-- Where each indexed root's document permissions come from (quarry index --acl-rules / --acl),
-- remembered so that a later run without the flags keeps applying them.
CREATE TABLE IF NOT EXISTS acl_roots (
    root   VARCHAR PRIMARY KEY,  -- an indexed root, as documents.root
    source VARCHAR NOT NULL,     -- none (every document public), posix, or rules
    rules  VARCHAR               -- the rules file (absolute path) when source = rules
);

-- Catalogs made before the LLM columns existed gain them here (run again before each run row).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_calls INTEGER DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_prompt_tokens INTEGER DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_completion_tokens INTEGER DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_cached INTEGER DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_fallback_windows JSON DEFAULT '[]';
-- Catalogs made before non-UTF-8 file names were stored losslessly (quarry/paths.py).
ALTER TABLE documents ADD COLUMN IF NOT EXISTS path_bytes BLOB;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS ocr_pages INTEGER DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS ocr_seconds DOUBLE DEFAULT 0;
-- Catalogs made before the task runner was a setting.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS runner VARCHAR DEFAULT '';
-- Catalogs made before unsupported files were named and refused runs had a reason.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS unsupported_files JSON DEFAULT '[]';
ALTER TABLE runs ADD COLUMN IF NOT EXISTS message VARCHAR DEFAULT '';
-- Catalogs made before documents carried principals: everything in them was public.
ALTER TABLE documents ADD COLUMN IF NOT EXISTS principals VARCHAR[] DEFAULT ['public'];
ALTER TABLE runs ADD COLUMN IF NOT EXISTS permissions_updated INTEGER DEFAULT 0;
-- Catalogs made before documents kept their page layout and parse warnings (the web page's document view).
ALTER TABLE documents ADD COLUMN IF NOT EXISTS page_offsets INTEGER[];
ALTER TABLE documents ADD COLUMN IF NOT EXISTS ocr_page_numbers INTEGER[];
ALTER TABLE documents ADD COLUMN IF NOT EXISTS warnings VARCHAR[];
-- Catalogs made before the corpus signals (docs/corpus.md).
ALTER TABLE documents ADD COLUMN IF NOT EXISTS content_hash VARCHAR;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS minhash BLOB;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS lsh_bands BIGINT[];
ALTER TABLE documents ADD COLUMN IF NOT EXISTS dup_cluster VARCHAR;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS dup_of VARCHAR;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS dup_similarity DOUBLE;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS lang VARCHAR;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS pii_total INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS norm_hash VARCHAR;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS line_hashes BIGINT[];
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS lang VARCHAR;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS pii_email INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS pii_phone INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS pii_card INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS pii_iban INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS pii_national_id INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS pii_secret INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS pii_total INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS q_words INTEGER;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS q_mean_word DOUBLE;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS q_alpha DOUBLE;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS q_dup_lines DOUBLE;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS q_top_2gram DOUBLE;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS q_dup_5gram DOUBLE;
-- Catalogs made before the boilerplate flag: NULL until the next commit computes every chunk's.
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS boilerplate DOUBLE;
