-- How many chunks' shares differ from a count from scratch (boilerplate_all, sql/boilerplate_all.sql).
SELECT count(*) FROM boilerplate_all;
