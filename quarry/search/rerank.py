"""Optional second-stage reranking of fused search candidates.

``get_reranker(spec)`` parses what ``--rerank`` takes:

- ``cross-encoder:/path/to/model``: a sentence-transformers ``CrossEncoder`` loaded from a local
  folder (``save_pretrained`` output); nothing is ever downloaded. Scores are the model's
  probabilities (sigmoid of the logit for one-label models), in [0, 1].
- ``llm`` or ``llm:MODEL``: a listwise rerank by a chat model on any OpenAI-compatible endpoint,
  configured as the indexing LLM is, by :class:`~quarry.core.settings.Settings`
  (``QUARRY_LLM_BASE_URL``, ``QUARRY_LLM_MODEL``, ``QUARRY_LLM_API_KEY`` falling back to
  ``OPENAI_API_KEY``, ``QUARRY_LLM_TIMEOUT``, or ``.env``), and called through the same client and
  retries (:mod:`quarry.core.openai`). The prompt numbers the passages and asks for a JSON ranking; the answer is
  repaired rather than trusted: unknown or repeated numbers are dropped and passages it left out
  follow in their original order. An LLM gives an order, not scores, so ``scores["rerank"]`` is
  ``(n - position) / n``.

Every reranker returns the results re-ordered, ``rank`` renumbered from 1, ``score`` set to the
rerank score and ``scores["rerank"]`` / ``ranks["rerank"]`` recorded; ``fused`` (the fusion score
in hybrid mode) is left as it was.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from quarry.core.errors import QuarryError, UsageError
from quarry.core.models import join_header
from quarry.core.registry import RERANKERS

if TYPE_CHECKING:
    import openai

DEFAULT_CANDIDATES = 30  # fused candidates a reranker sees unless told otherwise
PASSAGE_CHARS = 1200  # per passage in the LLM prompt: enough to judge, bounded prompt size


class Reranker(Protocol):
    name: str

    def rerank(self, query: str, results: Sequence) -> list: ...


def apply_order(results: Sequence, order: Sequence[int], scores: Sequence[float]) -> list:
    """``results`` re-ordered by ``order`` (indexes, best first), ``scores[i]`` the i-th's score."""
    out = []
    for new_rank, (i, s) in enumerate(zip(order, scores), start=1):
        r = results[i]
        out.append(
            replace(
                r,
                rank=new_rank,
                score=float(s),
                scores={**r.scores, "rerank": float(s)},
                ranks={**r.ranks, "rerank": new_rank},
            )
        )
    return out


# --- cross-encoder ---------------------------------------------------------------------------


class CrossEncoderReranker:
    """Scores (query, header + text) pairs with a local sentence-transformers cross-encoder."""

    def __init__(self, path: str, batch_size: int = 32, device: str | None = None):
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            raise UsageError(
                f"no cross-encoder model at {folder}: give a local folder saved with save_pretrained "
                "(it must hold config.json and the weights); quarry never downloads one"
            )
        self.path = str(folder)
        self.name = f"cross-encoder:{folder}"
        self.batch_size = batch_size
        self.device = device
        self._model = None

    @property
    def model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as exc:
                raise QuarryError(
                    "the cross-encoder reranker needs torch and sentence-transformers, which the "
                    "default install leaves out: pip install 'quarry[torch]'"
                ) from exc
            try:
                self._model = CrossEncoder(self.path, local_files_only=True, device=self.device or "cpu")
            except Exception as exc:
                raise QuarryError(
                    f"could not load the cross-encoder at {self.path}: {type(exc).__name__}: {str(exc)[:200]}"
                ) from exc
        return self._model

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Relevance of each text to ``query`` in [0, 1]."""
        import numpy as np

        if not texts:
            return []
        raw = np.asarray(
            self.model.predict([(query, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False),
            dtype=np.float64,
        )
        if raw.ndim == 2:  # several labels: the probability of the last ("relevant") one
            e = np.exp(raw - raw.max(axis=1, keepdims=True))
            raw = (e / e.sum(axis=1, keepdims=True))[:, -1]
        elif raw.size and (raw.min() < 0 or raw.max() > 1):  # a model saved without its activation
            raw = 1.0 / (1.0 + np.exp(-raw))
        return raw.tolist()

    def rerank(self, query: str, results: Sequence) -> list:
        scores = self.score(query, [join_header(r.header, r.text) for r in results])
        order = sorted(range(len(results)), key=lambda i: (-scores[i], i))
        return apply_order(results, order, [scores[i] for i in order])


# --- LLM listwise ----------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You rank search results. Given a query and numbered passages, order the passages from most to least "
    'relevant to the query. Answer with JSON only, in the form {"ranking": [3, 1, 2]}, listing every '
    "passage number exactly once."
)


def build_prompt(query: str, results: Sequence, passage_chars: int = PASSAGE_CHARS) -> str:
    """The user message: the query and the passages numbered from 1."""
    lines = [f"Query: {query}", "", "Passages:"]
    for i, r in enumerate(results, start=1):
        body = " ".join(join_header(r.header, r.text).split())
        if len(body) > passage_chars:
            body = body[: passage_chars - 1] + "…"
        lines.append(f"[{i}] {body}")
    lines += ["", f'Return {{"ranking": [...]}} with the numbers 1 to {len(results)}, most relevant first.']
    return "\n".join(lines)


def _as_number(item) -> int | None:
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item
    if isinstance(item, float) and item.is_integer():
        return int(item)
    if isinstance(item, dict):
        for key in ("id", "passage", "index", "number", "n"):
            if key in item:
                return _as_number(item[key])
        return None
    if isinstance(item, str):
        m = re.search(r"\d+", item)
        return int(m.group()) if m else None
    return None


def parse_ranking(content: str, n: int) -> tuple[list[int], bool]:
    """0-based order of ``n`` passages from a model's answer, and whether it needed repair.

    Accepts ``{"ranking": [...]}`` (or any object holding one list), a bare list, items given as
    numbers, strings ("3", "[3]", "passage 3") or objects with an ``id``; anything unreadable falls
    back to the numbers in the text. Out-of-range and repeated numbers are dropped; passages left
    out follow in their original order.
    """
    items: list | None = None
    try:
        data = json.loads(content)
    except (TypeError, ValueError):
        data = None
        m = re.search(r"\{.*\}|\[.*\]", content or "", re.S)
        if m:
            try:
                data = json.loads(m.group())
            except ValueError:
                data = None
    if isinstance(data, list):
        items = data
    elif isinstance(data, dict):
        items = data.get("ranking")
        if not isinstance(items, list):
            items = next((v for v in data.values() if isinstance(v, list)), None)
    if items is None:
        items = [int(x) for x in re.findall(r"\d+", content or "")]
    repaired = not (isinstance(data, (dict, list)))
    seen: list[int] = []
    for item in items:
        k = _as_number(item)
        if k is None or not 1 <= k <= n or (k - 1) in seen:
            repaired = True
            continue
        seen.append(k - 1)
    missing = [i for i in range(n) if i not in set(seen)]
    return seen + missing, repaired or bool(missing)


class LLMReranker:
    """Listwise rerank by a chat model on an OpenAI-compatible endpoint, one request per query."""

    def __init__(
        self,
        model: str = "",
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        passage_chars: int = PASSAGE_CHARS,
        policy=None,
        settings=None,
    ):
        """Arguments left as None come from ``settings`` (default: ``Settings.from_env()``)."""
        from quarry.core.openai.retry import RetryPolicy
        from quarry.core.settings import Settings

        if settings is None:
            settings = Settings.from_env()
        self.base_url = base_url if base_url is not None else settings.llm_base_url
        self.api_key = api_key if api_key is not None else settings.llm_api_key
        self.model = model or settings.llm_model_name
        if not self.base_url and not self.api_key:
            raise UsageError(
                "--rerank llm needs QUARRY_LLM_BASE_URL (a local OpenAI-compatible server) or "
                "QUARRY_LLM_API_KEY / OPENAI_API_KEY (the hosted API)"
            )
        self.timeout = float(timeout if timeout is not None else settings.llm_timeout)
        self.passage_chars = passage_chars
        self.policy = policy or RetryPolicy()
        self.name = f"llm:{self.model}"
        self.repairs = 0  # answers that needed repair, for callers that report it
        self._client: openai.OpenAI | None = None

    @property
    def client(self):
        if self._client is None:
            from quarry.core.openai.client import make_client

            self._client = make_client(self.base_url, self.api_key, timeout=self.timeout)
        return self._client

    def ask(self, query: str, results: Sequence) -> str:
        """The model's raw answer for these passages."""
        from quarry.core.openai.client import host_of
        from quarry.core.openai.redaction import describe_error
        from quarry.core.openai.retry import call_with_retries

        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": build_prompt(query, results, self.passage_chars)},
        ]
        try:
            response = call_with_retries(
                lambda: self.client.chat.completions.create(
                    model=self.model, messages=messages, temperature=0, response_format={"type": "json_object"}
                ),
                self.policy,
            )
        except Exception as exc:  # noqa: BLE001 - any endpoint failure becomes one QuarryError naming the host and cause
            raise QuarryError(
                f"LLM rerank via {host_of(self.base_url)} failed: {describe_error(exc, self.api_key)}"
            ) from None
        choices = getattr(response, "choices", None) or []
        return (choices[0].message.content or "") if choices else ""

    def rerank(self, query: str, results: Sequence) -> list:
        if len(results) < 2:
            return apply_order(results, list(range(len(results))), [1.0] * len(results))
        order, repaired = parse_ranking(self.ask(query, results), len(results))
        self.repairs += int(repaired)
        n = len(order)
        return apply_order(results, order, [(n - pos) / n for pos in range(n)])


# --- factory ---------------------------------------------------------------------------------

# ``--rerank KIND[:ARG]``: KIND -> factory(ARG) -> Reranker. A new reranker registers its kind here.


@RERANKERS.register("cross-encoder")
def _cross_encoder(arg: str) -> Reranker:
    if not arg:
        raise UsageError("--rerank cross-encoder needs a local model folder: cross-encoder:/path/to/model")
    return CrossEncoderReranker(arg)


@RERANKERS.register("llm")
def _llm(arg: str) -> Reranker:
    return LLMReranker(model=arg)


def get_reranker(spec: str) -> Reranker:
    """A reranker from a ``--rerank`` value: ``cross-encoder:PATH``, ``llm`` or ``llm:MODEL``."""
    kind, _, arg = (spec or "").strip().partition(":")
    return RERANKERS.get(kind)(arg)
