"""The request bodies, made from the declared arguments of a search (:mod:`quarry.search.parameters`).

Each field is one declaration's: its name, type, limits, default and description, so the JSON of
``POST /v1/search``, the MCP tools' parameters (:mod:`quarry.api.mcp`, from these fields) and
``quarry search``'s flags cannot drift apart. Unknown fields are refused (422), and every size a
caller picks is bounded (``k`` at most 1,000, ``candidates`` 10,000, a query 4,000 characters, a
window 50 chunks a side, segment parameters), so no request can make the server do unbounded work.
The same model serves ``POST /v1/search`` and the MCP ``search`` tool, and both answer with
:func:`quarry.search.serialize.payload`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from quarry.core.errors import UsageError
from quarry.search import parameters as p
from quarry.search.parameters import FILTERS, SEARCH, Param

MAX_QUERY = p.QUERY.max_length  # characters
MAX_K = p.K.maximum
MAX_WINDOW = p.WINDOW.maximum  # chunks on a side


def _checked_by(param: Param) -> AfterValidator:
    """The library's check of ``param`` as a pydantic validator (its message, the field named by pydantic)."""

    def validate(value):
        try:
            return param.check(value)
        except UsageError as exc:
            raise ValueError(str(exc)) from None

    return AfterValidator(validate)


def _at_most(items: int) -> Any:
    def validate(value):
        if isinstance(value, list) and len(value) > items:
            raise ValueError(f"at most {items} items, got {len(value)}")
        return value

    return validate


def _text(param: Param) -> Any:
    return Annotated[str, Field(max_length=param.max_length)]


def _type(param: Param) -> Any:
    """The pydantic type of a declared argument, with its limits and request bounds."""
    if param.kind == p.TEXT:
        if param.required:
            return Annotated[str, Field(min_length=1, max_length=param.max_length), _checked_by(param)]
        return _text(param)
    if param.kind == p.TEXTS:  # the schema states the bound; the validator words one message for it
        assert param.max_items is not None  # a list argument always has its request bound
        # types made at run time from the declaration: a type checker cannot follow them
        many = Annotated[list[_text(param)], Field(json_schema_extra={"maxItems": param.max_items})]  # type: ignore[misc, valid-type]
        return Annotated[_text(param) | many, AfterValidator(_at_most(param.max_items))]
    if param.kind == p.INT:
        return Annotated[int, Field(ge=param.minimum, le=param.maximum)]
    if param.kind == p.FLAG:
        return bool
    if param.kind == p.CHOICE:
        if param.registry is not None:  # plugins add names: checked when a request comes, not listed
            return Annotated[str, Field(max_length=param.max_length), _checked_by(param)]
        return Literal[param.choices]
    if param.kind == p.NUMBERS:
        bounded = Annotated[float, Field(ge=param.minimum, le=param.maximum)]
        return dict[Literal[param.keys], bounded]  # type: ignore[name-defined]  # keys from the declaration
    if param.kind == p.WINDOW_KIND:
        side = Annotated[int, Field(ge=param.minimum, le=param.maximum)]
        return Annotated[_text(param) | side | tuple[side, side], _checked_by(param)]
    if param.kind == p.SEGMENTS_KIND:
        return Literal[param.choices] | SegmentParams
    raise ValueError(f"no JSON form for the kind {param.kind!r} of {param.name}")


def field(param: Param) -> tuple[Any, Any]:
    """``(type, FieldInfo)`` of a declared argument, as :func:`pydantic.create_model` takes them."""
    kind = _type(param)
    if param.default is None:
        kind = kind | None
    default = ... if param.required else param.default
    return kind, Field(default, description=param.description)


def fields(declared: dict[str, Param]) -> dict[str, Any]:
    return {name: field(param) for name, param in declared.items()}


class SegmentParams(BaseModel):
    """A segments preset and overrides of its parameters (``RseParams``), within bounds."""

    model_config = ConfigDict(extra="forbid")

    preset: Literal[p.SEGMENTS.choices] = p.SEGMENTS.choices[0]  # type: ignore[name-defined]  # the declared presets
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


class _FilterFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    if TYPE_CHECKING:  # the fields are made by create_model from quarry/search/parameters.py, unseen by mypy

        def __init__(self, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

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


Filters = create_model(
    "Filters",
    __base__=_FilterFields,
    __doc__="The filter fields of ``POST /v1/search`` and ``POST /v1/answer``: the filter flags of "
    "``quarry search`` (``where``, ``path``, ``type``, ``since``, ``until``, ``doc``).",
    __module__=__name__,
    **fields(FILTERS),
)


class _SearchFields(Filters):
    def run(self, index, principals, rerankers: tuple[str, ...] = ()) -> dict:
        """Search ``index`` as a caller holding ``principals`` (None: everything); the CLI's JSON."""
        from quarry.search import serialize

        if self.rerank and self.rerank not in rerankers:
            enabled = ", ".join(rerankers) or "none"
            raise UsageError(f"rerank {self.rerank!r} is not enabled on this server (enabled: {enabled})")
        filters = self.filters()
        segments = self.segments.params() if isinstance(self.segments, SegmentParams) else self.segments
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
            window=self.window,
            principals=principals,
            collapse=self.collapse,
        )
        return serialize.payload(response, explained=self.explain)


SearchRequest = create_model(
    "SearchRequest",
    __base__=_SearchFields,
    __doc__="``POST /v1/search``: the fields are :meth:`quarry.Index.search`'s keywords and the filters "
    "(:class:`Filters`), as :data:`quarry.search.parameters.SEARCH` declares them.",
    __module__=__name__,
    **fields(SEARCH),
)
