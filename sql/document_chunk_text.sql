-- A document's chunks from $2 to $3 (chunk indexes, inclusive) with header and text. $1 doc_id.
SELECT chunk_index, header, text
FROM chunks WHERE doc_id = $1 AND chunk_index BETWEEN $2 AND $3 ORDER BY chunk_index;
