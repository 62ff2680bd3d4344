-- Set a meta key of a whole catalog ({schema} = main) or of a delta layer's own meta (layer).
INSERT OR REPLACE INTO {schema}.meta VALUES ($1, $2);
