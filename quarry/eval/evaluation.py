"""Retrieval evaluation on BEIR-format data sets: load, materialise as files, score.

A BEIR folder holds ``corpus.jsonl`` (``{"_id", "title", "text"}`` per line),
``queries.jsonl`` (``{"_id", "text"}``) and ``qrels/<split>.tsv`` (a header line, then
``query-id<TAB>corpus-id<TAB>score``). quarry indexes files, so ``write_corpus_tree`` turns
the corpus into one Markdown file per record and returns which file is which document.

Metrics follow trec_eval / pytrec_eval as BEIR reports them:

- ``ndcg@k``: gain = graded relevance, discount = log2(rank + 1) with ranks from 1, the
  ideal ranking is the judged relevances sorted best first, both cut at k;
- ``recall@k``: the share of relevant documents (relevance > 0) found in the top k;
- ``mrr@k``: 1 / rank of the first relevant document in the top k, 0 when none is there.

Judgments with relevance <= 0 count as not relevant: they add no gain and never enter the
ideal ranking. A query without any relevant document has no defined recall or nDCG, so
``evaluate`` leaves it out of the averages; a judged query that was not run counts as all
zeros (trec_eval's ``-c``), so skipping queries never flatters a score.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from quarry.core.errors import UsageError

FILES_PER_FOLDER = 1000
_NAME_MAX = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# Names Windows refuses whatever the extension; cheap to avoid, painful to meet.
_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {f"{p}{i}" for p in ("COM", "LPT") for i in range(1, 10)}


@dataclass
class BeirSet:
    """One split of a BEIR data set, held in memory."""

    name: str
    split: str
    corpus: dict[str, tuple[str, str]]  # doc_id -> (title, text)
    queries: dict[str, str]  # qid -> text, only queries judged in this split
    qrels: dict[str, dict[str, int]]  # qid -> doc_id -> graded relevance


# --- loading -----------------------------------------------------------------------------


def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise UsageError(f"{what} not found: {path} (expected a BEIR data set folder)")
    return path


def _read_jsonl(path: Path) -> Iterable[tuple[int, dict]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or "_id" not in record:
                raise UsageError(f'{path}:{lineno}: record has no "_id" field')
            yield lineno, record


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) < 3:
                raise UsageError(f"{path}:{lineno}: expected query-id, corpus-id, score separated by tabs")
            qid, doc_id, score = fields[0], fields[1], fields[2].strip()
            try:
                rel = int(score)
            except ValueError:
                if lineno == 1:  # the header line
                    continue
                raise UsageError(f"{path}:{lineno}: score {score!r} is not an integer") from None
            qrels.setdefault(qid, {})[doc_id] = rel
    return qrels


def load_beir(folder: str, split: str = "test") -> BeirSet:
    """Load one split of the BEIR data set in ``folder``.

    ``queries`` keeps only the queries that have judgments in ``split`` (as BEIR's own
    loader does). Judgments with score <= 0 are kept in ``qrels`` as judged-not-relevant.
    Raises ``UsageError`` naming the missing file, or listing the splits that exist.
    """
    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"BEIR data set folder not found: {root}")
    corpus_path = _require(root / "corpus.jsonl", "corpus file")
    queries_path = _require(root / "queries.jsonl", "queries file")
    qrels_dir = root / "qrels"
    if not qrels_dir.is_dir():
        raise UsageError(f"qrels folder not found: {qrels_dir} (expected qrels/<split>.tsv)")
    qrels_path = qrels_dir / f"{split}.tsv"
    if not qrels_path.is_file():
        available = sorted(p.stem for p in qrels_dir.glob("*.tsv"))
        listed = ", ".join(available) if available else "none"
        raise UsageError(f"no split {split!r} in {qrels_dir}: available splits: {listed}")

    corpus = {
        str(rec["_id"]): (str(rec.get("title") or ""), str(rec.get("text") or ""))
        for _, rec in _read_jsonl(corpus_path)
    }
    qrels = _read_qrels(qrels_path)
    all_queries = {str(rec["_id"]): str(rec.get("text") or "") for _, rec in _read_jsonl(queries_path)}
    missing = [qid for qid in qrels if qid not in all_queries]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise UsageError(f"{qrels_path} judges {len(missing)} queries absent from {queries_path}: {shown}")
    queries = {qid: all_queries[qid] for qid in qrels}
    return BeirSet(name=root.resolve().name, split=split, corpus=corpus, queries=queries, qrels=qrels)


# --- corpus as files ---------------------------------------------------------------------


def _short_hash(doc_id: str, length: int = 10) -> str:
    return hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:length]


def _file_stem(doc_id: str) -> str:
    """A portable file stem for ``doc_id``: ASCII, no separators, no leading dot.

    When cleaning changed the id, a hash of the id keeps distinct ids apart
    ("a/b" and "a b" both clean to "a_b").
    """
    clean = _UNSAFE.sub("_", doc_id).lstrip(".")[:_NAME_MAX]
    if clean and clean == doc_id and clean.upper() not in _RESERVED:
        return clean
    return f"{clean}-{_short_hash(doc_id)}" if clean else _short_hash(doc_id)


def _markdown(title: str, text: str) -> str:
    if not title:
        return f"{text}\n"
    # A heading is one line; a title with line breaks would spill into the body.
    return f"# {' '.join(title.split())}\n\n{text}\n"


def write_corpus_tree(beir: BeirSet, dest: str, *, files_per_folder: int = FILES_PER_FOLDER) -> dict[str, str]:
    """Write each corpus record as a Markdown file under ``dest``; return path -> doc_id.

    Files go into numbered subfolders (``0000/``, ``0001/`` ...) of at most
    ``files_per_folder`` files, in corpus order. Paths in the result are relative to
    ``dest`` with ``/`` separators. Names are unique even on case-insensitive file systems.
    Existing files that are not part of the corpus are left alone.
    """
    if files_per_folder < 1:
        raise UsageError(f"files_per_folder must be at least 1, got {files_per_folder}")
    root = Path(dest)
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    for index, (doc_id, (title, text)) in enumerate(beir.corpus.items()):
        folder = f"{index // files_per_folder:04d}"
        stem = _file_stem(doc_id)
        if f"{folder}/{stem}".casefold() in taken:
            # Only ids differing in case (or a literal id equal to another's hashed name)
            # get here; the full hash settles it.
            stem = f"{stem[:_NAME_MAX]}-{_short_hash(doc_id, 40)}"
        rel = f"{folder}/{stem}.md"
        taken.add(f"{folder}/{stem}".casefold())
        path = root / folder / f"{stem}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_markdown(title, text), encoding="utf-8", newline="\n")
        mapping[rel] = doc_id
    return mapping


# --- metrics -----------------------------------------------------------------------------


def _dedupe(ranking: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def ndcg_at_k(ranking: list[str], rels: Mapping[str, int], k: int) -> float:
    """nDCG@k of ``ranking`` (best first) against graded ``rels``; 0.0 if nothing is relevant."""
    _check_k(k)
    top = _dedupe(ranking)[:k]
    dcg = sum(max(rels.get(doc, 0), 0) / math.log2(rank + 1) for rank, doc in enumerate(top, 1))
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(rank + 1) for rank, r in enumerate(ideal, 1))
    return dcg / idcg if idcg else 0.0


def recall_at_k(ranking: list[str], rels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (rel > 0) found in the top k; 0.0 if none is relevant."""
    _check_k(k)
    relevant = {doc for doc, r in rels.items() if r > 0}
    if not relevant:
        return 0.0
    found = sum(1 for doc in _dedupe(ranking)[:k] if doc in relevant)
    return found / len(relevant)


def mrr_at_k(ranking: list[str], rels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the top k, else 0.0."""
    _check_k(k)
    for rank, doc in enumerate(_dedupe(ranking)[:k], start=1):
        if rels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def evaluate(rankings: Mapping[str, list[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean ndcg@10, recall@10, recall@100 and mrr@10 over the queries in ``qrels``.

    A query without a ranking scores 0 on every metric; a query with no relevant document
    is left out of the averages; rankings for queries absent from ``qrels`` are ignored.
    Raises ``UsageError`` when no query in ``qrels`` has a relevant document.
    """
    metrics = {
        "ndcg@10": lambda r, j: ndcg_at_k(r, j, 10),
        "recall@10": lambda r, j: recall_at_k(r, j, 10),
        "recall@100": lambda r, j: recall_at_k(r, j, 100),
        "mrr@10": lambda r, j: mrr_at_k(r, j, 10),
    }
    totals = dict.fromkeys(metrics, 0.0)
    scored = 0
    for qid, judged in qrels.items():
        if not any(r > 0 for r in judged.values()):
            continue
        ranking = rankings.get(qid, [])
        for name, metric in metrics.items():
            totals[name] += metric(ranking, judged)
        scored += 1
    if not scored:
        raise UsageError("no query in the judgments has a relevant document: nothing to score")
    return {name: total / scored for name, total in totals.items()}


def chunk_ranking_to_docs(chunk_doc_ids: list[str]) -> list[str]:
    """Turn a ranked list of per-chunk document ids into a document ranking.

    Each document keeps the rank of its best chunk: ``[a, b, a, c] -> [a, b, c]``.
    """
    return _dedupe(chunk_doc_ids)
