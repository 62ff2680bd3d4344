-- The flag-only changes of boilerplate_all (sql/boilerplate_all.sql) into wanted_boilerplate: all of
-- them when texts stay ($1 false), else those whose texts cannot change (no boilerplate, before or now).
INSERT INTO wanted_boilerplate
SELECT chunk_id, doc_id, share, NULL, NULL FROM boilerplate_all
WHERE share IS DISTINCT FROM stored AND NOT ($1::BOOLEAN AND (share > 0 OR stored > 0));
