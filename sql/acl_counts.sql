-- What the audit log records of a store's permissions: documents, those readable by more or other
-- than public, and the distinct principals named.
SELECT count(*) AS documents,
       count(*) FILTER (WHERE principals IS DISTINCT FROM ['public']) AS restricted,
       (SELECT count(DISTINCT p) FROM (SELECT unnest(principals) AS p FROM documents)) AS principals
FROM documents;
