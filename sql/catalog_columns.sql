-- The tables and columns of a catalog's main schema (a base's tables). ?1: the catalog's name.
SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main';
