-- The columns of one table of one layer (a reader of a store an older quarry wrote reads the ones
-- it lacks as NULL: quarry/store/layers.py:chunk_rows_sql). ?1 database, ?2 schema, ?3 table.
SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = ? AND table_name = ?;
