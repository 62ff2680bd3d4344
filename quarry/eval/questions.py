"""Question sets drawn from a store's own corpus, for scoring retrieval without human judgments.

Each question names the document it came from (``doc_id``, ``path``), its page span and the chunk
(``chunk_id``; ``chunk_ids``: every chunk that counts as the source, a section's chunks for a
heading). Methods:

- ``known-item`` (no model): simulated known-item queries after Azzopardi, de Rijke & Balog,
  "Building simulated queries for known-item topics" (SIGIR 2007). Pick a document; draw a query
  length ``l`` (Poisson, mean 3, at least 2, at most 6); draw ``l`` distinct terms, each with
  probability ``1 - noise`` from the document model and otherwise from the collection model
  ``p(t) = cf(t) / |C|`` (the user misremembers). The document model is *discriminative*,
  ``p(t|d) ∝ b(t, d) / p(t)`` (terms present in the document, weighted by how rare they are in the
  collection), or, for ``known-item-popular``, ``p(t|d) = tf(t, d) / |d|``. The question's chunk is
  the document's chunk holding most of the query's document terms.
- ``headings`` (no model): a titled section's title, as a query for that section (every chunk of
  it counts). Titles that occur in more than one document, page/figure labels and one-word titles
  shorter than 5 letters are skipped: no reader could tell which section they meant.
- ``llm``: a question and reference answer per sampled chunk from the chat endpoint
  (:mod:`quarry.eval.llmquestions`).

Documents (or sections) are sampled stratified by (file type, folder): strata take turns, in a
random order, so a large folder cannot fill the set. Everything is drawn from one
``random.Random(seed)`` over rows read in a fixed order (documents by relative path): the same
store, method and seed give the same questions, and so does the same tree indexed the same way in
another store or from another place (a question's ids are those of its own store). ``principals``
(``--as``) keeps only documents they may read, for the collection statistics too.
"""

from __future__ import annotations

import math
import random
import re
from bisect import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from quarry.core.errors import UsageError
from quarry.core.sqlfiles import load_sql
from quarry.eval.sampling import stratified, stratum
from quarry.retrieval.stopwords import STOPWORDS
from quarry.search.filters import with_filter

__all__ = ["METHODS", "generate", "words", "known_item_questions", "heading_questions", "read_corpus", "Corpus"]

NOISE = 0.1  # share of query terms drawn from the collection model
MEAN_LENGTH = 3
_WORD = re.compile(r"[^\W\d_]{3,}")
_LABEL = re.compile(
    r"^(page|slide|sheet|figure|fig|table|chapter|section|part|appendix)?\s*[\divxlc.]*$", re.IGNORECASE
)


def words(text: str) -> list[str]:
    """Lower-cased words of three letters or more, stop words left out: the terms queries are drawn from."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


@dataclass
class Corpus:
    """What the methods read: the documents they may draw from, their chunks, and (known-item) the
    collection's term counts."""

    documents: list[dict]  # doc_id, path, rel_path, file_type, title; in relative-path order
    read_chunks: Callable[[list[str]], list[dict]]
    read_sections: Callable[[list[str]], list[dict]]
    collection: Callable[[], Counter]
    generation: int


def read_corpus(idx, principals=None) -> Corpus:
    """The documents of ``idx``'s committed generation the principals may read (all without)."""
    snap = idx.snapshot
    access = idx.access_filter(principals)
    if access is not None and not snap.has_principals:
        access = None  # a catalog from before permissions: every document is public
    sql, params = with_filter(load_sql("eval_documents"), access)
    cur = snap.con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    documents = [dict(zip(cols, row)) for row in cur.fetchall()]

    def rows_of(name: str, ids: list[str]) -> list[dict]:
        cur = snap.con.execute(load_sql(name), [ids])
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def collection() -> Counter:
        counts: Counter = Counter()
        sql, params = with_filter(load_sql("eval_term_counts"), access)
        cur = snap.con.execute(sql, params)
        while batch := cur.fetchmany(4096):
            for _doc, text in batch:
                counts.update(words(text or ""))
        return counts

    return Corpus(
        documents,
        lambda ids: rows_of("eval_chunks", ids),
        lambda ids: rows_of("eval_sections", ids),
        collection,
        snap.pointer.generation,
    )


def _poisson(rng: random.Random, mean: float) -> int:
    # Knuth's method: exact, and fine for a mean of a few terms.
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _weighted_pick(rng: random.Random, terms: list[str], cumulative: list[float]) -> str:
    return terms[min(bisect(cumulative, rng.random() * cumulative[-1]), len(terms) - 1)]


def _cumulative(weights: Iterable[float]) -> list[float]:
    out, total = [], 0.0
    for w in weights:
        total += w
        out.append(total)
    return out


def _question(
    method: str, number: int, query: str, doc: dict, chunk: dict, chunk_ids: list[str], generation: int, **extra
) -> dict:
    return {
        "id": f"{method}-{number:05d}",
        "query": query,
        "method": method,
        "doc_id": doc["doc_id"],
        "path": doc["path"],
        "file_type": doc.get("file_type"),
        "page_start": chunk.get("page_start"),
        "page_end": chunk.get("page_end"),
        "chunk_id": chunk_ids[0],
        "chunk_ids": chunk_ids,
        "generation": generation,
        **extra,
    }


def known_item_questions(
    corpus: Corpus, n: int, rng: random.Random, *, popular: bool = False, noise: float = NOISE
) -> list[dict]:
    """``n`` simulated known-item queries (see the module's docstring)."""
    method = "known-item-popular" if popular else "known-item"
    counts = corpus.collection()
    if not counts:
        return []
    total = sum(counts.values())
    vocab = sorted(counts)
    coll_cum = _cumulative(counts[t] for t in vocab)
    picked: list[dict[str, Any]] = []
    for _ in range(4):  # a small corpus gives each document more than one query
        picked += stratified(corpus.documents, stratum, n - len(picked), rng)
        if len(picked) >= n or not corpus.documents:
            break
    out: list[dict] = []
    by_doc: dict[str, list[dict]] = defaultdict(list)
    for row in corpus.read_chunks(sorted({d["doc_id"] for d in picked})):
        by_doc[row["doc_id"]].append(row)
    for doc in picked:
        chunks = by_doc.get(doc["doc_id"], [])
        chunk_words = [words(c["text"] or "") for c in chunks]
        tf = Counter(w for ws in chunk_words for w in ws)
        if len(tf) < 5:
            continue  # too little text to remember anything by
        terms = sorted(tf)
        weights: list[float]
        if popular:
            weights = [tf[t] for t in terms]
        else:
            weights = [total / counts[t] for t in terms]  # b(t, d) / p(t), up to a constant
        length = max(2, min(6, _poisson(rng, MEAN_LENGTH)))
        query: list[str] = []
        from_doc: set[str] = set()
        for _attempt in range(length * 8):
            if len(query) >= length:
                break
            if rng.random() < noise:
                term = _weighted_pick(rng, vocab, coll_cum)
            else:
                term = _weighted_pick(
                    rng, terms, _cumulative(0.0 if t in from_doc else w for t, w in zip(terms, weights))
                )
                from_doc.add(term)
            if term not in query:
                query.append(term)
        if not from_doc:
            continue
        best = max(range(len(chunks)), key=lambda i: (len(from_doc & set(chunk_words[i])), -i))
        chunk = chunks[best]
        out.append(_question(method, len(out) + 1, " ".join(query), doc, chunk, [chunk["chunk_id"]], corpus.generation))
    return out


def good_heading(title: str) -> bool:
    """Whether a section title says enough to be a query: not a page or figure label, not one short word."""
    text = " ".join(title.split())
    if not text or _LABEL.match(text):
        return False
    alpha = _WORD.findall(text)
    return len(alpha) >= 2 or (len(alpha) == 1 and len(alpha[0]) >= 5)


def heading_questions(corpus: Corpus, n: int, rng: random.Random) -> list[dict]:
    """``n`` section titles as queries for their sections (see the module's docstring)."""
    docs = {d["doc_id"]: d for d in corpus.documents}
    place = {doc_id: i for i, doc_id in enumerate(docs)}
    # In the documents' order (relative path), not the id order they are read in.
    sections = sorted(corpus.read_sections(sorted(docs)), key=lambda s: (place[s["doc_id"]], s["section_index"]))
    owners: dict[str, set[str]] = defaultdict(set)
    for s in sections:
        owners[" ".join(s["title"].split()).casefold()].add(s["doc_id"])
    usable = [
        s for s in sections if good_heading(s["title"]) and len(owners[" ".join(s["title"].split()).casefold()]) == 1
    ]
    picked = stratified(usable, lambda s: stratum(docs[s["doc_id"]]), n, rng)
    out: list[dict[str, Any]] = []
    for s in picked:
        chunk_ids = list(s["chunk_ids"])
        out.append(
            _question(
                "headings",
                len(out) + 1,
                " ".join(s["title"].split()),
                docs[s["doc_id"]],
                s,
                chunk_ids,
                corpus.generation,
                section=s["title"],
            )
        )
    return out


METHODS = ("known-item", "known-item-popular", "headings", "llm")


def generate(
    idx, n: int = 200, method: str = "known-item", seed: int = 0, principals=None, llm=None
) -> tuple[dict, list[dict]]:
    """A question set from the committed generation of the open index ``idx``: (header, questions).

    ``llm``: an :class:`~quarry.eval.llmquestions.QuestionWriter` for the ``llm`` method.
    """
    if method not in METHODS:
        raise UsageError(f"unknown question method {method!r}; choose one of {', '.join(METHODS)}")
    if n < 1:
        raise UsageError(f"-n must be at least 1, got {n}")
    rng = random.Random(f"{method}:{seed}")
    with idx.pinned():
        corpus = read_corpus(idx, principals)
        if not corpus.documents:
            raise UsageError(
                "no document to draw questions from" + (" that these principals may read" if principals else "")
            )
        if method == "headings":
            questions = heading_questions(corpus, n, rng)
        elif method == "llm":
            from quarry.eval.llmquestions import llm_questions

            if llm is None:
                raise UsageError(
                    "the llm method needs a chat endpoint: --llm-base-url and --llm-model "
                    "($QUARRY_LLM_BASE_URL, $QUARRY_LLM_MODEL)"
                )
            questions = llm_questions(corpus, n, rng, llm)
        else:
            questions = known_item_questions(corpus, n, rng, popular=method == "known-item-popular")
    header = {
        "method": method,
        "seed": seed,
        "generation": corpus.generation,
        "requested": n,
        "principals": list(principals) if principals else None,
    }
    return header, questions
