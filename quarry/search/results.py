"""What a search returns: :class:`SearchResult` (one hit) and :class:`SearchResponse` (the hits,
the windows or segments asked for, and the settings, counts and timings that produced them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from quarry.search.fusion import DEFAULT_FUSION, DEFAULT_K
from quarry.search.segments import Segment
from quarry.search.windows import Window

__all__ = ["SearchResult", "SearchResponse"]


@dataclass
class SearchResult:
    """One hit.

    ``score`` is what the results are ranked by: the fused score in ``hybrid`` mode, the
    retriever's own score otherwise. ``fused`` is the fused score (None outside ``hybrid``).
    ``scores``/``ranks`` hold each retriever's raw score and 1-based rank among its candidates
    (None where that retriever did not return the chunk), for ``--explain``. ``match`` says how
    strongly each retriever matched the chunk in its own terms, whether or not it ranked it:
    ``{"bm25": {"terms", "matched", "of", "score"} | None, "vector": {"cosine"} | None}``
    (:mod:`quarry.search.relevance`).
    """

    rank: int
    score: float
    chunk_id: str
    doc_id: str
    path: str
    title: str
    section: str
    header: str
    text: str
    page_start: int | None
    page_end: int | None
    chunk_index: int = 0
    section_index: int = 0
    file_type: str = ""
    start_char: int = 0
    end_char: int = 0
    fused: float | None = None
    scores: dict[str, float | None] = field(default_factory=dict)
    ranks: dict[str, int | None] = field(default_factory=dict)
    match: dict = field(default_factory=lambda: {"bm25": None, "vector": None})
    # other chunks holding this passage ({chunk_id, doc_id, path}), folded into this hit by the
    # default collapse of duplicates (quarry/search/collapse.py); empty without copies or collapse;
    # at most collapse.COPIES_LIMIT of them, ``copies_total`` counts every readable copy
    copies: list[dict] = field(default_factory=list)
    copies_total: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchResponse:
    """The results and the settings that produced them (``filter`` is the filter in words,
    ``timings`` milliseconds per stage, ``counts`` candidates per retriever and rows the filter
    kept, ``weak`` whether no result really matched)."""

    query: str
    mode: str
    results: list[SearchResult]
    generation: int = 0  # the committed generation every part of this answer was read from
    k: int = 10
    candidates: int = 0
    rrf_k: int = DEFAULT_K
    fusion: str = DEFAULT_FUSION
    weights: dict[str, float] = field(default_factory=dict)
    min_scores: dict[str, float] = field(default_factory=dict)
    filter: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    windows: list[Window] | None = None  # with search(..., window=): the results widened, best first
    segments: list[Segment] | None = None  # with search(..., segments=): relevant segments, best first
    warnings: list[str] = field(default_factory=list)  # what the search could not do as asked
    # True when no result passes the relevance threshold (quarry/search/relevance.py): nothing
    # really matched, whatever the fused scores say; True as well when there is no result
    weak: bool = True

    def to_dict(self) -> dict:
        """Plain data for JSON; ``windows``/``segments`` only when they were asked for."""
        out = asdict(self)
        for name in ("windows", "segments"):
            if out[name] is None:
                del out[name]
        return out
