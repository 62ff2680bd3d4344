-- Where these documents' rows were before this run (previous_owners: a temporary view of the
-- committed generation's layer.owners, quarry/store/writer.py). $1: VARCHAR[] of doc ids.
SELECT doc_id, doc_layer, content_layer FROM previous_owners WHERE doc_id IN (SELECT unnest($1::VARCHAR[]));
