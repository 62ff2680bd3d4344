"""The query side: :class:`quarry.search.query.Index`, filters, fusion, rerank, windows, segments, export.

Never imports Prefect, LanceDB or torch on the query path.
"""
