-- What the planner compares discovered files against (read by quarry/store/reader.py,
-- committed_catalog). path_bytes: the exact name when it is
-- not valid UTF-8 (quarry/paths.py), else NULL; mtime_us: microseconds since the epoch (UTC). trusted: the row's size and mtime may stand for
-- its bytes (discovery does not read the file again while both match): its mtime lies at least
-- $1 seconds before the start of the run that wrote it, so a write within the clock tick of the
-- hash (same size, same mtime) cannot hide (quarry/core/plans.py, RACY_SECONDS); trust_before_us:
-- that start less the margin, which a file's ctime must precede too (a rename over it, a copy that
-- restores mtimes: anything that changes the inode after the hash moves its ctime past it).
SELECT d.doc_id, d.path, d.root, d.sha256, epoch_us(d.mtime) AS mtime_us, d.size, d.path_bytes,
       coalesce(d.mtime <= r.started - to_microseconds(CAST($1 * 1000000 AS BIGINT)), false) AS trusted,
       epoch_us(r.started) - CAST($1 * 1000000 AS BIGINT) AS trust_before_us
FROM documents d LEFT JOIN runs r USING (run_id);
