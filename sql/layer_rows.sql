-- The chunks a delta layer holds itself: its index segment's rows.
SELECT count(*) FROM layer.chunks;
