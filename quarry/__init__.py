"""quarry: a batch indexer for document collections with hybrid search.

``quarry.index(paths, db)`` indexes (the Prefect flow in ``quarry.flows.index``, as ``quarry index``
runs it) and ``quarry.open(db).search("query")`` searches (README, "Python API"). The names in
``__all__`` are imported on first use, so ``import quarry`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path as _Path

from quarry import _checkout

__version__ = "0.1.0"

_checkout.install(_Path(__file__).resolve().parent)

# name -> module that defines it
_EXPORTS = {
    "Index": "quarry.search.query",
    "SearchResponse": "quarry.search.query",
    "SearchResult": "quarry.search.query",
    "Filter": "quarry.search.filters",
    "Window": "quarry.search.windows",
    "Segment": "quarry.search.segments",
    "RseParams": "quarry.search.segments",
    "Reranker": "quarry.search.rerank",
    "ExportReport": "quarry.search.export",
    "Answer": "quarry.search.answer",
    "Citation": "quarry.search.citations",
    "Passage": "quarry.search.evidence",
    "Settings": "quarry.core.settings",
    "QuarryError": "quarry.core.errors",
    "UsageError": "quarry.core.errors",
    "ConfigError": "quarry.core.errors",
    "StoreNotFound": "quarry.core.errors",
    "ModelMismatch": "quarry.core.errors",
    "RunRefused": "quarry.core.errors",
    "StoreLocked": "quarry.core.errors",
}

__all__ = [
    "open",
    "index",
    "__version__",
    "Index",
    "SearchResponse",
    "SearchResult",
    "Filter",
    "Window",
    "Segment",
    "RseParams",
    "Reranker",
    "ExportReport",
    "Answer",
    "Citation",
    "Passage",
    "Settings",
    "QuarryError",
    "UsageError",
    "ConfigError",
    "StoreNotFound",
    "ModelMismatch",
    "RunRefused",
    "StoreLocked",
]


def open(db=None, settings=None, **kwargs):
    """Open the index at ``db`` (default ``$QUARRY_DB`` or ``./.quarry``) for searching; returns an
    :class:`Index`. Use it as a context manager, or call ``close()``.

    ``kwargs`` go to the index (``vector_search="auto"|"exact"|"ivf"|"binary"``, ``cache_size``).
    """
    from quarry.search.query import open as _open

    return _open(db, settings, **kwargs)


def index(paths, db=None, **kwargs):
    """Index the files under ``paths`` into the store ``db``; returns the run report. What
    ``quarry index`` does, flag for keyword: see :func:`quarry.flows.run.index`."""
    from quarry.flows.run import index as _index

    return _index(paths, db, **kwargs)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'quarry' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
