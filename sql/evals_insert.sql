-- One row of the evals table (quarry/store/evals.py fills it from evals.jsonl).
INSERT INTO evals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);
