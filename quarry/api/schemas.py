"""The request bodies: every option of :meth:`quarry.Index.search`, checked at the door.

Unknown fields are refused (422), and every size a caller picks is bounded (``k`` at most 1,000,
``candidates`` 10,000, a query 4,000 characters, a window 50 chunks a side, segment parameters),
so no request can make the server do unbounded work. The same model serves ``POST /v1/search``
and the MCP ``search`` tool, and both answer with :func:`quarry.search.serialize.payload`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from quarry.core.errors import UsageError

MAX_QUERY = 4000  # characters
MAX_K = 1000
MAX_CANDIDATES = 10_000
MAX_WINDOW = 50  # chunks on a side
MAX_LIST = 50  # items of a list filter (where, path, type)
MAX_DOCS = 1000  # document ids of a doc filter
MAX_EXPR = 2000  # characters of one where expression or glob

Text = Annotated[str, Field(max_length=MAX_EXPR)]
Side = Annotated[int, Field(ge=0, le=MAX_WINDOW)]


class SegmentParams(BaseModel):
    """A segments preset and overrides of its parameters (``RseParams``), within bounds."""

    model_config = ConfigDict(extra="forbid")

    preset: Literal["balanced", "precision", "find_all"] = "balanced"
    max_length: int | None = Field(None, ge=1, le=200)
    overall_max_length: int | None = Field(None, ge=1, le=1000)
    minimum_value: float | None = Field(None, ge=-100, le=100)
    irrelevant_chunk_penalty: float | None = Field(None, ge=0, le=10)
    decay_rate: float | None = Field(None, gt=0, le=10_000)
    top_k_for_document_selection: int | None = Field(None, ge=1, le=MAX_K)
    chunk_length_adjustment: bool | None = None
    reference_length: int | None = Field(None, ge=1, le=100_000)
    relevance: Literal["auto", "scores", "rank", "rerank"] | None = None
    results: int | None = Field(None, ge=1, le=MAX_K)

    def params(self):
        from quarry.search.segments import get_params

        return get_params(self.preset, **self.model_dump(exclude={"preset"}, exclude_none=True))


class Filters(BaseModel):
    """The filter fields of ``POST /v1/search`` and ``POST /v1/answer``: the filter flags of
    ``quarry search`` (``where``, ``path``, ``type``, ``since``, ``until``, ``doc``)."""

    model_config = ConfigDict(extra="forbid")

    where: Text | list[Text] | None = Field(
        None, description="Filter expressions, all of which must hold (docs/query.md), e.g. \"file_type = 'pdf'\"."
    )
    path: Text | list[Text] | None = Field(None, description="Path globs, any of which may match.")
    type: Text | list[Text] | None = Field(None, description="File types, e.g. pdf.")
    since: str | None = Field(None, max_length=64, description="Modified on or after (YYYY-MM-DD, or 7d).")
    until: str | None = Field(None, max_length=64, description="Modified on or before (YYYY-MM-DD).")
    doc: str | list[Annotated[str, Field(max_length=200)]] | None = Field(None, description="Document ids.")

    @field_validator("where", "path", "type", mode="after")
    @classmethod
    def _short_lists(cls, value):
        if isinstance(value, list) and len(value) > MAX_LIST:
            raise ValueError(f"at most {MAX_LIST} items")
        return value

    @field_validator("doc", mode="after")
    @classmethod
    def _few_docs(cls, value):
        if isinstance(value, list) and len(value) > MAX_DOCS:
            raise ValueError(f"at most {MAX_DOCS} document ids")
        return value

    def filters(self):
        """The :class:`~quarry.search.filters.Filter` of these fields (an empty one when none is set)."""
        from quarry.search.filters import Filter

        try:
            return Filter.build(
                where=self.where or (),
                path=self.path or (),
                since=self.since,
                until=self.until,
                file_type=self.type or (),
                doc_id=self.doc or (),
            )
        except UsageError as exc:  # the library's messages name the CLI's flag; here the field is `where`
            raise UsageError(str(exc).replace("--where", "where", 1)) from None


class SearchRequest(Filters):
    """``POST /v1/search``: the fields are :meth:`quarry.Index.search`'s keywords and the filters
    (:class:`Filters`)."""

    query: str = Field(min_length=1, max_length=MAX_QUERY, description="What to search for.")
    k: int = Field(10, ge=1, le=MAX_K, description="Results to return.")
    mode: Literal["hybrid", "vector", "bm25"] = Field(
        "hybrid", description="hybrid: both retrievers fused; vector: by meaning; bm25: exact words, codes, numbers."
    )
    candidates: int | None = Field(
        None, ge=1, le=MAX_CANDIDATES, description="Candidates per retriever before fusion (default max(50, 5k))."
    )
    fusion: str = Field("tmm", max_length=64, description="A fusion method: tmm, rrf, or a plugin's.")
    rrf_k: int = Field(60, ge=0, le=10_000)
    weights: dict[Literal["vector", "bm25", "documents"], Annotated[float, Field(ge=0, le=1000)]] | None = None
    min_scores: dict[Literal["vector", "bm25", "fused"], Annotated[float, Field(ge=-1e6, le=1e6)]] | None = Field(
        None,
        description="Drop candidates scoring below a floor, per retriever in its own terms: vector a cosine "
        '(-1 to 1, e.g. 0.4), bm25 a BM25 score, fused a fused score; e.g. {"vector": 0.4}. '
        "Each result's `match` shows these scores; `weak` says when no result really matched.",
    )
    window: Annotated[str, Field(max_length=16)] | Side | tuple[Side, Side] | None = Field(
        None, description="Chunks before and after each hit: 'B,A', one number for both, or [B, A]."
    )
    segments: Literal["balanced", "precision", "find_all"] | SegmentParams | None = Field(
        None, description="Relevant segments instead of single chunks: a preset, or {preset, ...overrides}."
    )
    rerank: str | None = Field(
        None, max_length=200, description="A reranker this server enables (quarry api --rerank)."
    )
    rerank_candidates: int = Field(30, ge=1, le=MAX_K)
    explain: bool = Field(False, description="Each result's retriever ranks and scores.")
    collapse: bool = Field(True, description="Copies of a passage take one place; the hit lists them in `copies`.")

    @field_validator("fusion", mode="after")
    @classmethod
    def _fusion(cls, value: str) -> str:
        from quarry.core.registry import FUSIONS

        if value not in FUSIONS:
            raise ValueError(f"unknown fusion {value!r}; choose one of {', '.join(FUSIONS)}")
        return value

    @field_validator("window", mode="after")
    @classmethod
    def _small_window(cls, value):
        if isinstance(value, str):
            from quarry.search.windows import parse_window

            try:
                before, after = parse_window(value)
            except UsageError as exc:
                raise ValueError(str(exc)) from None
            if max(before, after) > MAX_WINDOW:
                raise ValueError(f"at most {MAX_WINDOW} chunks on a side")
            return (before, after)
        return value

    @field_validator("query", mode="after")
    @classmethod
    def _not_blank(cls, value: str):
        if not value.strip():
            raise ValueError("the query is empty")
        return value

    def run(self, index, principals, rerankers: tuple[str, ...] = ()) -> dict:
        """Search ``index`` as a caller holding ``principals`` (None: everything); the CLI's JSON."""
        from quarry.search import serialize

        if self.rerank and self.rerank not in rerankers:
            enabled = ", ".join(rerankers) or "none"
            raise UsageError(f"rerank {self.rerank!r} is not enabled on this server (enabled: {enabled})")
        filters = self.filters()
        segments = self.segments.params() if isinstance(self.segments, SegmentParams) else self.segments
        window = list(self.window) if isinstance(self.window, tuple) else self.window
        response = index.search(
            self.query,
            self.k,
            self.mode,
            candidates=self.candidates,
            rrf_k=self.rrf_k,
            fusion=self.fusion,
            weights=self.weights,
            min_scores=self.min_scores,
            filters=filters or None,
            rerank=self.rerank or None,
            rerank_candidates=self.rerank_candidates,
            segments=segments,
            window=window,
            principals=principals,
            collapse=self.collapse,
        )
        return serialize.payload(response, explained=self.explain)
