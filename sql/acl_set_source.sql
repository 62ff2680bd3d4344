-- Remember a root's permission source. $1 root, $2 source (none, posix, rules), $3 rules file or NULL.
INSERT OR REPLACE INTO acl_roots (root, source, rules) VALUES ($1, $2, $3);
