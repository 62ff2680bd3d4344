"""Search-index structures: text normalisation, BM25, dense and binary vectors, row tables.

Pure data structures over arrays and a DuckDB connection; they know nothing of files being
indexed (``ingest``), of the store's commit protocol (``store``) or of queries (``search``).
"""
