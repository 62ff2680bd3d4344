-- One runs row from the registered Arrow table new_run: a whole catalog's ({schema} = main) or a
-- delta layer's own (layer).
INSERT INTO {schema}.runs BY NAME SELECT * FROM new_run;
