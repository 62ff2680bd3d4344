"""Search-index structures: text normalisation, BM25, dense and binary vectors, row tables; and the
corpus signals (``corpus/``) that the catalog's rows carry.

Pure data structures over arrays and a DuckDB connection, and pure functions of a text; they know
nothing of files being indexed (``ingest``), of the store's commit protocol (``store``) or of
queries (``search``), and all three use them: a batch computes the signals, a commit recomputes
duplicate clusters and boilerplate flags from them, a query collapses copies with them.
"""
