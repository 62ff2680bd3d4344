INSERT INTO layer.runs BY NAME SELECT * FROM new_run;
