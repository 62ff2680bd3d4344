"""The ``llm`` question method: a question and a reference answer per sampled chunk, from the chat endpoint.

Chunks are sampled by document, stratified by (file type, folder) like the other methods; one chunk
of 200 characters or more per sampled document, drawn at random. The prompt (:data:`QUESTION_PROMPT`)
asks for a question a user would ask *without having seen the passage*, answerable from it, and a
short answer taken from it. A reply is kept only when it passes three filters; the others are
counted by reason in the set's header (``rejected``):

- ``first-words``: the answer is already in the chunk's first :data:`FIRST_WORDS` words (a question
  about a title or a heading tests nothing a heading query would not);
- ``copies``: the question repeats a run of :data:`COPY_RUN` or more of the chunk's words (a
  lexical giveaway that flatters BM25);
- ``formatting``: the question is about layout rather than content (pages, fonts, bullets, tables
  as objects);
- ``failed``: no usable answer (not JSON, no question, an endpoint error) — counted, never guessed.

Answers are cached in the store's LLM cache like the index's own LLM work, so drawing the same set
again costs no calls.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

from quarry.ingest.llm.cache import cache_key
from quarry.ingest.llm.client import Job, LLMFailure, LLMRuntime

__all__ = ["QuestionWriter", "llm_questions", "QUESTION_PROMPT", "check_question", "EvalJob"]

PROMPT_VERSIONS = {"eval_question": "q1", "eval_judge": "j1"}
FIRST_WORDS = 12
COPY_RUN = 6
MIN_CHARS = 200
QUESTION_PROMPT = (
    "You write test questions for a search engine over a document collection.\n"
    "Read the passage. Write ONE question that a user who has NOT seen the passage might ask, which the "
    "passage answers. Ask about its content (facts, numbers, names, reasons), never about its layout, "
    "formatting, pages or headings. Use your own words: do not copy phrases from the passage. Then give "
    "the short answer, taken from the passage.\n"
    'Reply with JSON only: {"question": "...", "answer": "..."}'
)
QUESTION_SCHEMA = {
    "type": "object",
    "properties": {"question": {"type": "string"}, "answer": {"type": "string"}},
    "required": ["question", "answer"],
}
_FORMATTING = re.compile(
    r"\b(page|pages|font|fonts|bold|italic|bullet|bullets|format|formatted|formatting|layout|"
    r"heading|headings|header|footer|column|columns|table of contents|slide number|"
    r"figure number|section number|paragraph number)\b",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"\w+")


class EvalJob(Job):
    """A chat request of the evaluation, cached under its own prompt versions (the index's prompt
    versions are part of its settings' fingerprint; these are not)."""

    def key(self, model: str) -> str:
        request = {"messages": self.messages, "schema": self.schema, "max_tokens": self.max_tokens}
        return cache_key(self.kind, model, PROMPT_VERSIONS[self.kind], request)


class QuestionWriter:
    """Asks the chat endpoint for questions; counts what the filters rejected."""

    def __init__(self, runtime: LLMRuntime):
        self.runtime = runtime
        self.rejected: Counter = Counter()

    @classmethod
    def from_settings(cls, settings, store: Path | None = None) -> QuestionWriter:
        from quarry.core.errors import UsageError

        if not settings.llm_base_url:
            raise UsageError(
                "the llm method needs a chat endpoint: --llm-base-url ($QUARRY_LLM_BASE_URL) "
                "and --llm-model ($QUARRY_LLM_MODEL)"
            )
        return cls(LLMRuntime(settings, store))

    def ask(self, passages: list[str]) -> list[object]:
        jobs = [
            EvalJob(
                kind="eval_question",
                schema=QUESTION_SCHEMA,
                schema_name="question",
                max_tokens=200,
                messages=[
                    {"role": "system", "content": QUESTION_PROMPT},
                    {"role": "user", "content": f"Passage:\n{p[:4000]}"},
                ],
            )
            for p in passages
        ]
        return self.runtime.run(jobs)

    def close(self) -> None:
        self.runtime.close()


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


def check_question(question: str, answer: str, passage: str) -> str | None:
    """Why a generated (question, answer) fails the filters (``first-words``, ``copies``,
    ``formatting``), or None when it passes."""
    if _FORMATTING.search(question):
        return "formatting"
    q, p = _tokens(question), _tokens(passage)
    runs = {tuple(p[i : i + COPY_RUN]) for i in range(len(p) - COPY_RUN + 1)}
    if any(tuple(q[i : i + COPY_RUN]) in runs for i in range(len(q) - COPY_RUN + 1)):
        return "copies"
    head = set(p[:FIRST_WORDS])
    answer_words = [t for t in _tokens(answer) if len(t) > 2]
    if answer_words and all(t in head for t in answer_words):
        return "first-words"
    return None


def llm_questions(corpus, n: int, rng: random.Random, writer: QuestionWriter) -> list[dict]:
    """Up to ``n`` filtered questions, one per sampled document's chunk (see the module's docstring).

    Documents are drawn in rounds of twice what is still missing (the filters reject some), at most
    four rounds, each document once."""
    from quarry.eval.sampling import stratified, stratum

    order = stratified(corpus.documents, stratum, len(corpus.documents), rng)
    out: list[dict] = []
    at = 0
    for _round in range(4):
        if len(out) >= n or at >= len(order):
            break
        docs = order[at : at + 2 * (n - len(out))]
        at += len(docs)
        by_doc: dict[str, list[dict]] = {}
        for row in corpus.read_chunks(sorted({d["doc_id"] for d in docs})):
            by_doc.setdefault(row["doc_id"], []).append(row)
        picked = []
        for doc in docs:
            usable = [c for c in by_doc.get(doc["doc_id"], []) if len((c["text"] or "").strip()) >= MIN_CHARS]
            if usable:
                picked.append((doc, rng.choice(usable)))
        answers = writer.ask([c["text"] for _, c in picked])
        for (doc, chunk), reply in zip(picked, answers):
            if len(out) >= n:
                break
            if isinstance(reply, LLMFailure) or not isinstance(reply, dict):
                writer.rejected["failed"] += 1
                continue
            question = " ".join(str(reply.get("question") or "").split())
            answer = " ".join(str(reply.get("answer") or "").split())
            if not question:
                writer.rejected["failed"] += 1
                continue
            why = check_question(question, answer, chunk["text"])
            if why:
                writer.rejected[why] += 1
                continue
            out.append(
                {
                    "id": f"llm-{len(out) + 1:05d}",
                    "query": question,
                    "method": "llm",
                    "doc_id": doc["doc_id"],
                    "path": doc["path"],
                    "file_type": doc.get("file_type"),
                    "page_start": chunk.get("page_start"),
                    "page_end": chunk.get("page_end"),
                    "chunk_id": chunk["chunk_id"],
                    "chunk_ids": [chunk["chunk_id"]],
                    "generation": corpus.generation,
                    "answer": answer,
                }
            )
    return out
