"""The arguments of a search and of an answer, declared once: name, kind, default, limits, description.

Every surface is made from these declarations: ``quarry search``'s and ``quarry ask``'s options
(:mod:`quarry.cli.options`), the fields of ``POST /v1/search`` and ``POST /v1/answer``
(:mod:`quarry.api.schemas`), and the parameters of the MCP ``search`` and ``answer`` tools
(:mod:`quarry.api.mcp`, from those fields). :meth:`quarry.Index.search` and
:meth:`quarry.Index.answer` check their arguments through them (:meth:`Param.check`), so a limit
is written here and nowhere else; ``tests/test_search_surfaces.py`` compares the surfaces with it.

A name is the library's keyword, the JSON field and the MCP parameter; the CLI spells it
``--name-with-dashes`` (and ``-k``, ``--min-score``). Limits are of two sorts:

- ``minimum`` and ``maximum`` (a number, each side of a window, each value of a mapping) hold
  everywhere: the library refuses what lies outside them, and so does every surface;
- ``max_length`` and ``max_items`` bound the size of a request (characters of a text, items of a
  list): the served surfaces refuse more, so no caller can make the server do unbounded work,
  while the library and the CLI read any length (a query longer than the model reads is cut,
  with a warning).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quarry.core.errors import UsageError
from quarry.core.models import FUSION_WEIGHTS, RETRIEVERS, SEARCH_MODES
from quarry.core.registry import FUSIONS, Registry
from quarry.search.fusion import DEFAULT_FUSION, DEFAULT_K
from quarry.search.rerank import DEFAULT_CANDIDATES
from quarry.search.windows import parse_window

__all__ = [
    "Param",
    "KINDS",
    "REQUIRED",
    "FILTERS",
    "SEARCH",
    "ANSWER",
    "check",
    "QUERY",
    "K",
    "MODE",
    "WINDOW",
    "SEGMENTS",
    "QUESTION",
    "ANSWER_K",
    "STYLE",
    "MAX_CONTEXT_TOKENS",
    "DEFAULT_CONTEXT_TOKENS",
]

# what an argument is; each surface maps a kind to its own form (a flag, a JSON type)
TEXT = "text"  # a string
TEXTS = "texts"  # a string or a list of them (a repeatable flag)
INT = "int"  # a whole number within [minimum, maximum]
CHOICE = "choice"  # one of `choices`, or of a registry's names
FLAG = "flag"  # true or false
NUMBERS = "numbers"  # a mapping of `keys` to numbers within [minimum, maximum]
WINDOW_KIND = "window"  # chunks (before, after): "B,A", one number for both, or a pair; each side within limits
SEGMENTS_KIND = "segments"  # a preset of `choices` (the HTTP body also takes a preset and overrides)
KINDS = (TEXT, TEXTS, INT, CHOICE, FLAG, NUMBERS, WINDOW_KIND, SEGMENTS_KIND)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the default of an argument every call must give


@dataclass(frozen=True)
class Param:
    """One argument: what it is called, takes and means, and its limits (see the module's docstring)."""

    name: str
    kind: str
    description: str
    default: Any = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] = ()
    registry: Registry | None = None  # the choices are this registry's names (plugins add some)
    keys: tuple[str, ...] = ()  # a mapping's keys
    max_length: int | None = None  # characters of a text (of each item of a list), a request bound
    max_items: int | None = None  # items of a list, a request bound
    label: str = ""  # what an error calls a wrong choice ("search mode"); the name by default

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r} of {self.name}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def names(self) -> tuple[str, ...]:
        """The values a choice takes (a registry's, read now: a plugin may have added one)."""
        return self.registry.names() if self.registry is not None else self.choices

    def check(self, value):
        """``value`` as the library runs it; a :class:`UsageError` that says what this argument takes
        when it is not one. Request bounds (``max_length``, ``max_items``) are the surfaces' to check."""
        if self.kind == NUMBERS:
            return self._numbers(value)  # none: {}
        if value is None and self.default is None:
            return None
        if self.kind == INT:
            if isinstance(value, bool):
                raise UsageError(f"{self.name} must be a whole number, got {value!r}")
            try:
                number = operator.index(value)
            except TypeError:
                raise UsageError(f"{self.name} must be a whole number, got {value!r}") from None
            return self._within(number, self.name)
        if self.kind == CHOICE:
            if (value in self.registry) if self.registry is not None else (value in self.choices):
                return value
            raise UsageError(f"unknown {self.label or self.name} {value!r}; choose one of {', '.join(self.names())}")
        if self.kind == TEXT:
            if not isinstance(value, str):
                raise UsageError(f"{self.name} takes a string, got {type(value).__name__}")
            if self.required and not value.strip():
                raise UsageError(f"the {self.name} is empty")
            return value
        if self.kind == WINDOW_KIND:
            return self._window(value)
        return value

    def _within(self, number, what: str):
        if self.minimum is not None and number < self.minimum:
            raise UsageError(f"{what} must be at least {self.minimum}, got {number!r}")
        if self.maximum is not None and number > self.maximum:
            raise UsageError(f"{what} must be at most {self.maximum}, got {number!r}")
        return number

    def _numbers(self, value) -> dict[str, float]:
        if not value:
            return {}
        if not isinstance(value, Mapping):
            raise UsageError(f"{self.name} takes a mapping of {', '.join(self.keys)} to numbers, got {value!r}")
        unknown = set(value) - set(self.keys)
        if unknown:
            raise UsageError(
                f"{self.name}: unknown key {', '.join(sorted(map(str, unknown)))}; use {', '.join(self.keys)}"
            )
        out = {}
        for key, v in value.items():
            try:
                out[key] = float(v)
            except (TypeError, ValueError):
                raise UsageError(f"{self.name}: {key} must be a number, got {v!r}") from None
            if not math.isfinite(out[key]):
                raise UsageError(f"{self.name}: {key} must be finite, got {v!r}")
            self._within(out[key], f"{self.name}: {key}")
        return out

    def _window(self, value) -> tuple[int, int]:
        """``(before, after)`` from ``(b, a)``, one int for both sides, or ``"B,A"``."""
        if isinstance(value, int) and not isinstance(value, bool):
            value = (value, value)
        if isinstance(value, str):
            pair = parse_window(value)
        else:
            pair = tuple(value) if isinstance(value, (tuple, list)) else ()
            if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair):
                raise UsageError(f"window takes (before, after) as two non-negative integers, got {value!r}")
        if self.maximum is not None and max(pair) > self.maximum:
            raise UsageError(f"window takes at most {self.maximum} chunks on a side, got {pair[0]},{pair[1]}")
        return pair[0], pair[1]


def _by_name(*params: Param) -> dict[str, Param]:
    return {p.name: p for p in params}


def check(declared: Mapping[str, Param], **values) -> dict[str, Any]:
    """``values`` checked against their declarations in ``declared``, as :meth:`Param.check` returns them."""
    return {name: declared[name].check(value) for name, value in values.items()}


# --- filters: a search's, an answer's and an export's ----------------------------------------------

MAX_EXPR = 2000  # characters of one where expression, glob or type

FILTERS = _by_name(
    Param(
        "where",
        TEXTS,
        'Filter expressions, all of which must hold, e.g. "file_type = \'pdf\'" or "mtime >= 2024-01-01" '
        "(docs/query.md).",
        max_length=MAX_EXPR,
        max_items=50,
    ),
    Param("path", TEXTS, "Path globs, any of which may match, e.g. reports/**.", max_length=MAX_EXPR, max_items=50),
    Param("type", TEXTS, "File types, any of which may match, e.g. pdf.", max_length=MAX_EXPR, max_items=50),
    Param("since", TEXT, "Only files modified on or after this time: YYYY-MM-DD, or 7d (h, d, w) ago.", max_length=64),
    Param(
        "until",
        TEXT,
        "Only files modified on or before this time: YYYY-MM-DD (the whole day), or 7d ago.",
        max_length=64,
    ),
    Param("doc", TEXTS, "Document ids, any of which may match.", max_length=200, max_items=1000),
)

# --- a search: Index.search --------------------------------------------------------------------------

QUERY = Param("query", TEXT, "What to search for.", REQUIRED, max_length=4000)
K = Param("k", INT, "Results to return.", 10, minimum=1, maximum=1000)
MODE = Param(
    "mode",
    CHOICE,
    "hybrid: both retrievers fused; vector: by meaning; bm25: exact words, codes, numbers.",
    "hybrid",
    choices=SEARCH_MODES,
    label="search mode",
)
WINDOW = Param(
    "window",
    WINDOW_KIND,
    "Chunks before and after each hit from its document, merged where they meet: B,A, or one number for both sides.",
    minimum=0,
    maximum=50,
    max_length=16,
)
SEGMENTS = Param(
    "segments",
    SEGMENTS_KIND,
    "Relevant segments (dsRAG RSE) instead of single chunks, by a preset: balanced, precision or find_all.",
    choices=("balanced", "precision", "find_all"),  # segments.PRESETS: that module loads numpy
)

SEARCH = _by_name(
    QUERY,
    K,
    MODE,
    Param("candidates", INT, "Candidates per retriever before fusion (default max(50, 5k)).", None, 1, 10_000),
    Param(
        "fusion",
        CHOICE,
        "How hybrid fuses: tmm (normalised scores), rrf (ranks), or a plugin's.",
        DEFAULT_FUSION,
        registry=FUSIONS,
        max_length=64,
    ),
    Param("rrf_k", INT, "RRF's constant k.", DEFAULT_K, 0, 10_000),
    Param(
        "weights",
        NUMBERS,
        "Fusion weight per retriever, vector and bm25 (1 each; 0 skips one), and of the document evidence, "
        "documents (1; 0 turns it off).",
        None,
        0,
        1000,  # weights multiply scores: bounded, so that sums stay finite
        keys=FUSION_WEIGHTS,
    ),
    Param(
        "min_scores",
        NUMBERS,
        "Drop candidates scoring below a floor, per retriever in its own terms: vector a cosine (-1 to 1, "
        "e.g. 0.4), bm25 a BM25 score, fused a fused score. Each result's `match` shows these scores; `weak` "
        "says when no result really matched.",
        keys=(*RETRIEVERS, "fused"),  # any finite floor: a floor is only compared (one above every score cuts all)
    ),
    WINDOW,
    SEGMENTS,
    Param(
        "rerank",
        TEXT,
        "Rerank the fused candidates: cross-encoder:PATH, llm or llm:MODEL (a server runs only those it "
        "enables: quarry api --rerank).",
        max_length=200,
    ),
    Param("rerank_candidates", INT, "Fused candidates handed to the reranker.", DEFAULT_CANDIDATES, 1, 1000),
    Param("explain", FLAG, "Each result's retriever ranks and scores, and the fused score.", False),
    Param(
        "collapse",
        FLAG,
        "Copies of a passage in other files take one place; the hit lists them in `copies`.",
        True,
    ),
)

# --- an answer: Index.answer ---------------------------------------------------------------------------

QUESTION = Param("question", TEXT, "What to answer.", REQUIRED, max_length=QUERY.max_length)
ANSWER_K = Param("k", INT, "Search results the evidence is cut from.", 8, minimum=1, maximum=100)
DEFAULT_CONTEXT_TOKENS = 3000  # tokens of evidence per prompt
MAX_CONTEXT_TOKENS = Param(
    "max_context_tokens",
    INT,
    f"Tokens of evidence in the prompt (default {DEFAULT_CONTEXT_TOKENS}; $QUARRY_ANSWER_CONTEXT_TOKENS where the "
    "index is opened).",
    None,
    50,
    1_000_000,
)
STYLE = Param(
    "style",
    CHOICE,
    "Ask for structured claims (json) or prose with [n] markers (text); auto is json.",
    "auto",
    choices=("auto", "json", "text"),
    label="answer style",
)

ANSWER = _by_name(QUESTION, ANSWER_K, MODE, MAX_CONTEXT_TOKENS, STYLE)
