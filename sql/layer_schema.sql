-- What a delta layer holds beside its own rows (quarry/store/layers.py): which layer holds each
-- document's row and each document's sections and chunks, for every document changed since the
-- generation's base (NULL: deleted). Documents not listed are the base's.
CREATE TABLE IF NOT EXISTS layer.owners (
    doc_id        VARCHAR PRIMARY KEY,
    doc_layer     INTEGER,
    content_layer INTEGER
);
