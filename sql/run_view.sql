-- One index run by id. $1 run_id.
SELECT * FROM runs WHERE run_id = $1;
