-- Where each indexed root's permissions come from (quarry/store/acl.py).
SELECT root, source, rules FROM acl_roots ORDER BY root;
