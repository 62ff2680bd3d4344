"""Scoring a question set against the committed index, guarding thresholds, tracking generations.

For each question the search returns ranked chunks; three rankings are read from them:

- documents: each document at the rank of its best chunk; relevant: the question's ``doc_id``;
- pages: each (document, page span) once; relevant: a result of the question's document whose
  pages overlap the question's (a document without pages: any result of it);
- chunks: relevant: any of the question's ``chunk_ids`` (a heading's whole section).

A question has one relevant document, so recall@k is the share of questions whose source is in the
top k (hit rate) and MRR@k the mean of 1 / its rank there (0 below k). The search asks for
``5 * k`` chunks so that the document ranking has k distinct documents in most cases.

Metric names (``--fail-under``, the ``metrics`` column): ``recall@K``, ``mrr@K`` (documents),
``page_recall@K``, ``page_mrr@K``, ``chunk_recall@K``, ``chunk_mrr@K``.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from quarry.core.errors import QualityBelowThreshold, UsageError

__all__ = ["score_set", "parse_thresholds", "check_thresholds", "regressions", "eval_rows", "LEVELS"]

LEVELS = ("", "page_", "chunk_")  # metric prefixes: documents, pages, chunks
_THRESHOLD = re.compile(r"^((?:page_|chunk_)?(?:recall|mrr|ndcg)@\d+)=([0-9]*\.?[0-9]+)$")


def _pages_overlap(q: dict, r) -> bool:
    if q.get("page_start") is None or r.page_start is None:
        return True
    q_end = q.get("page_end") if q.get("page_end") is not None else q["page_start"]
    r_end = r.page_end if r.page_end is not None else r.page_start
    return r.page_start <= q_end and q["page_start"] <= r_end


def ranks_of(question: dict, results) -> dict[str, int | None]:
    """The 1-based rank of the question's source in the document, page and chunk rankings of ``results``."""
    docs: list[str] = []
    pages: list[tuple] = []
    doc_rank = page_rank = chunk_rank = None
    wanted = set(question.get("chunk_ids") or [question.get("chunk_id")])
    chunk_no = 0
    for r in results:
        chunk_no += 1
        if r.doc_id not in docs:
            docs.append(r.doc_id)
            if doc_rank is None and r.doc_id == question["doc_id"]:
                doc_rank = len(docs)
        unit = (r.doc_id, r.page_start, r.page_end)
        if unit not in pages:
            pages.append(unit)
            if page_rank is None and r.doc_id == question["doc_id"] and _pages_overlap(question, r):
                page_rank = len(pages)
        if chunk_rank is None and r.chunk_id in wanted:
            chunk_rank = chunk_no
    return {"": doc_rank, "page_": page_rank, "chunk_": chunk_rank}


def metrics_of(ranks: list[dict[str, int | None]], k: int) -> dict[str, float]:
    """recall@k and mrr@k per level over the questions' ranks."""
    n = max(len(ranks), 1)
    out = {}
    for level in LEVELS:
        found = [x for x in (r[level] for r in ranks) if x is not None and x <= k]
        out[f"{level}recall@{k}"] = len(found) / n
        out[f"{level}mrr@{k}"] = sum(1.0 / x for x in found) / n
    return out


def score_set(
    idx, questions: list[dict], modes=("hybrid",), k: int = 10, search_kwargs: dict | None = None, principals=None
) -> dict[str, dict]:
    """Per mode: the metrics, the questions' ranks and the seconds it took (one search per question)."""
    if k < 1:
        raise UsageError(f"--k must be at least 1, got {k}")
    if not questions:
        raise UsageError("the question set is empty: nothing to score")
    out = {}
    with idx.pinned():
        idx.prime_queries([q["query"] for q in questions])
        for mode in modes:
            started = time.perf_counter()
            ranks = []
            for q in questions:
                response = idx.search(q["query"], k=5 * k, mode=mode, principals=principals, **(search_kwargs or {}))
                ranks.append(ranks_of(q, response.results))
            out[mode] = {
                "metrics": metrics_of(ranks, k),
                "ranks": ranks,
                "seconds": round(time.perf_counter() - started, 3),
                "generation": idx.generation,
            }
    return out


def parse_thresholds(values) -> dict[str, float]:
    """``["recall@10=0.8", ...]`` (or comma-separated) as ``{"recall@10": 0.8}``."""
    out = {}
    for value in values or ():
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            match = _THRESHOLD.match(part)
            if not match:
                raise UsageError(
                    f"--fail-under {part!r}: expected METRIC=VALUE, e.g. recall@10=0.80 "
                    f"(metrics: recall@K, mrr@K, page_recall@K, page_mrr@K, chunk_recall@K, chunk_mrr@K)"
                )
            out[match.group(1)] = float(match.group(2))
    return out


def check_thresholds(per_mode: dict[str, dict[str, float]], thresholds: dict[str, float]) -> None:
    """Raise :class:`QualityBelowThreshold` naming every (mode, metric) below its threshold, with the figures."""
    low = []
    for mode, metrics in per_mode.items():
        for name, floor in thresholds.items():
            if name not in metrics:
                raise UsageError(
                    f"--fail-under {name}: this evaluation has no such metric (it has {', '.join(sorted(metrics))})"
                )
            if metrics[name] < floor:
                low.append(f"{mode} {name} {metrics[name]:.3f} < {floor:.3f}")
    if low:
        raise QualityBelowThreshold("quality below threshold: " + "; ".join(low))


def regressions(previous: list[dict], row: dict, margin: float) -> str | None:
    """Why ``row`` falls more than ``margin`` below the latest earlier generation's row of the same set,
    mode and k (None when it does not, or there is none)."""
    earlier = [
        p
        for p in previous
        if p.get("set_name") == row["set_name"]
        and p.get("mode") == row["mode"]
        and p.get("k") == row["k"]
        and (p.get("generation") or 0) < row["generation"]
    ]
    if not earlier:
        return None
    last = max(earlier, key=lambda p: (p.get("generation") or 0, p.get("created") or ""))
    drops = []
    for name, value in (row.get("metrics") or {}).items():
        before = (last.get("metrics") or {}).get(name)
        if isinstance(before, (int, float)) and isinstance(value, (int, float)) and value < before - margin:
            drops.append(f"{name} {value:.3f} < {before:.3f} (generation {last['generation']}) - {margin:g}")
    return "; ".join(drops) or None


def eval_rows(
    set_name: str,
    method: str,
    scored: dict[str, dict],
    k: int,
    settings: dict | None = None,
    judge: dict | None = None,
    questions: int = 0,
) -> list[dict]:
    """The ``evals`` rows of one scoring: one per mode."""
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="seconds")
    rows = []
    for mode, result in scored.items():
        metrics = result["metrics"]
        rows.append(
            {
                "eval_id": uuid.uuid4().hex[:16],
                "created": now,
                "set_name": set_name,
                "method": method,
                "generation": result["generation"],
                "mode": mode,
                "k": k,
                "questions": result.get("questions", questions),
                "recall": metrics.get(f"recall@{k}"),
                "mrr": metrics.get(f"mrr@{k}"),
                "settings": {**(settings or {}), "mode": mode},
                "metrics": metrics,
                "judge": (judge or {}).get(mode),
                "seconds": result.get("seconds"),
                "flagged": None,
            }
        )
    return rows


def run_set(
    idx,
    set_ref: str,
    modes=("hybrid",),
    k: int = 10,
    *,
    fail_under=None,
    margin: float | None = None,
    search_kwargs: dict | None = None,
    principals=None,
    answers=None,
    record: bool = True,
) -> dict:
    """``quarry eval run``: score the question set ``set_ref`` (a set's name in the store, or a JSONL
    file) per mode, append a row per mode to the store's ``evals`` (unless ``record`` is False), flag
    a row falling more than ``margin`` below the previous generation's, then apply ``fail_under``
    (raises :class:`QualityBelowThreshold` after recording).

    ``answers``: a callable ``(idx, questions, mode) -> {"judge": summary, "items": [...]}`` (the
    ``--answers`` path, :func:`quarry.eval.judge.answer_and_judge`), run per mode.
    """
    from quarry.store import evals

    thresholds = parse_thresholds(fail_under)
    meta, questions = evals.load_set(idx.store, set_ref)
    scored = score_set(idx, questions, modes, k, search_kwargs, principals)
    judged = {}
    if answers is not None:
        for mode in modes:
            judged[mode] = answers(idx, questions, mode)
    settings = {"fusion": (search_kwargs or {}).get("fusion", "default"), "model": idx.snapshot.pointer.model}
    rows = eval_rows(
        meta.get("name") or set_ref,
        meta.get("method") or "mixed",
        scored,
        k,
        settings,
        {m: j["judge"] for m, j in judged.items()},
        len(questions),
    )
    previous = evals.rows(idx.store)
    for row in rows:
        if margin is not None:
            row["flagged"] = regressions(previous, row, margin)
        if record:
            evals.record(idx.store, row)
    result = {
        "set": meta.get("name") or set_ref,
        "method": meta.get("method"),
        "questions": len(questions),
        "k": k,
        "generation": idx.generation,
        "rows": rows,
        "answers": {m: j.get("items") for m, j in judged.items()} or None,
    }
    result["failed"] = None
    try:
        check_thresholds({r["mode"]: r["metrics"] for r in rows}, thresholds)
    except QualityBelowThreshold as exc:
        result["failed"] = str(exc)
    return result


def evaluate_generation(store, sets: list[str], margin: float = 0.05, modes=("hybrid",), k: int = 10) -> dict:
    """After an index run: score each question set in ``sets`` on the store's committed generation (once:
    a set already scored on this generation with these modes and k is left alone), flag every row more
    than ``margin`` below the previous generation's. A set the store does not hold is reported in
    ``missing``, not an error (the first run comes before any set can be drawn)."""
    from quarry.core.errors import NotFound
    from quarry.search.query import open as open_index
    from quarry.store import evals

    out: dict[str, Any] = {"generation": None, "rows": [], "flagged": [], "missing": [], "already": []}
    with open_index(store) as idx:
        out["generation"] = generation = idx.generation
        done = {
            (r.get("set_name"), r.get("mode"), r.get("k"))
            for r in evals.rows(idx.store)
            if r.get("generation") == generation
        }
        for name in sets:
            todo = tuple(m for m in modes if (name, m, k) not in done)
            if not todo:
                out["already"].append(name)
                continue
            try:
                result = run_set(idx, name, todo, k, margin=margin)
            except NotFound:
                out["missing"].append(name)
                continue
            out["rows"] += result["rows"]
            out["flagged"] += [f"{r['set_name']} {r['mode']}: {r['flagged']}" for r in result["rows"] if r["flagged"]]
    return out
