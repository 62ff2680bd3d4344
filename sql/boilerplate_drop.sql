-- The commit's temporary boilerplate tables, once applied.
DROP TABLE IF EXISTS wanted_boilerplate;
DROP TABLE IF EXISTS boilerplate_all;
