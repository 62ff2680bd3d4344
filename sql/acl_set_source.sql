-- Remember a root's permission source. $1 root, $2 source (none, posix, rules), $3 rules file or NULL.
-- {schema}: main for a whole catalog, layer for a delta layer (which holds the whole small
-- acl_roots, carried from the layer before it).
INSERT OR REPLACE INTO {schema}.acl_roots (root, source, rules) VALUES ($1, $2, $3);
