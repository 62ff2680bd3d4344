-- Runs, newest first. $1: limit.
SELECT * FROM runs ORDER BY started DESC, run_id DESC LIMIT $1;
