-- Remember a root's permission source in a delta layer (which holds the whole small acl_roots,
-- carried from the layer before it).
INSERT OR REPLACE INTO layer.acl_roots (root, source, rules) VALUES ($1, $2, $3);
