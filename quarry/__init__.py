"""quarry: a batch indexer for document collections with hybrid search.

``quarry.open(db).search("query")`` is the Python API; indexing runs as the Prefect flow in
``quarry.flows.index`` (``quarry index`` on the command line).
"""

from __future__ import annotations

from pathlib import Path as _Path

from quarry import _checkout

__version__ = "0.1.0"

_checkout.install(_Path(__file__).resolve().parent)


def open(db=None, settings=None, **kwargs):  # noqa: A001 - mirrors the builtin on purpose: quarry.open(db)
    """Open the index at ``db`` for searching; see :class:`quarry.search.query.Index`.

    ``kwargs`` go to the index (``vector_search="auto"|"exact"|"ivf"|"binary"``, ``cache_size``).
    """
    from quarry.search.query import open as _open

    return _open(db, settings, **kwargs)
