-- A document's page layout and parse warnings (catalogs that have these columns). $1 doc_id.
SELECT page_offsets, ocr_page_numbers, warnings FROM documents WHERE doc_id = $1;
