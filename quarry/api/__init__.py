"""Serving the index: the HTTP API (``quarry api``), its keys, and the MCP server (``quarry mcp``).

A thin layer over the library, as the CLI is: every endpoint and tool calls :class:`quarry.Index`
(search, document, chunk, status, runs) and answers with :mod:`quarry.search.serialize`, so the
server has no search, filter, permission or JSON code of its own. Never imports Prefect, LanceDB
or torch.
"""
