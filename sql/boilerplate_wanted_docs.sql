-- The documents whose chunks wanted_boilerplate changes (sql/boilerplate_wanted.sql).
SELECT DISTINCT doc_id FROM wanted_boilerplate ORDER BY doc_id;
