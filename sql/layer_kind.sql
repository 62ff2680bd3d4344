-- Whether a catalog is a delta layer (it has the schema `layer`; quarry/store/layers.py). ?1: the
-- catalog's name, or NULL for the connection's current one.
SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'layer' AND database_name = coalesce(?, current_database());
