-- What a commit writes of chunks' boilerplate shares (quarry/store/boilerplate.py): texts NULL where
-- they stay. sql/boilerplate_apply.sql and sql/layer_boilerplate_apply.sql read it.
CREATE OR REPLACE TEMP TABLE wanted_boilerplate (
    chunk_id VARCHAR, doc_id VARCHAR, boilerplate DOUBLE, search_text VARCHAR, text_hash VARCHAR
);
