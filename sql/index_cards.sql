-- Each document's card for a segment's cards.* files (quarry/retrieval/cards.py): its path
-- under the indexed root and the company, type, period, fiscal year and aliases (ticker symbols,
-- short names it defines for itself) its parser found, by
-- doc_id (the order of docs.arrow). Not the title: a title is a summary of the content, which
-- the chunks already carry, while these name which document it is.
SELECT doc_id,
       concat_ws(' ', rel_path, metadata->>'company', metadata->>'doc_type', metadata->>'period',
                 metadata->>'fiscal_year', metadata->>'aliases') AS card
FROM index_documents ORDER BY doc_id;
