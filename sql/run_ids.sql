-- Every run id in the runs table (to skip journal lines already merged).
SELECT run_id FROM runs;
