"""LLM context: document titles and summaries, section summaries, per-chunk context lines.

Every request of a batch is built first and answered together by the run's
:class:`~quarry.ingest.llm.client.LLMRuntime` (cache first, then concurrent calls). Inputs are cut to
``llm_input_tokens``. Where a request fails, the rule-based value stays and the run report
names the file; the model's title is used only when the document has none of its own.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePosixPath

from quarry.core.models import Chunk, FileInfo, ParsedDocument, Section
from quarry.ingest.context import CONTEXT_WRITERS, DEFAULT_FIELDS, ContextWriter, clean_summary, own_title
from quarry.ingest.llm.client import Job, LLMFailure
from quarry.ingest.llm.prompts import (
    CHUNK_CONTEXT_USER,
    DOCUMENT_SCHEMA,
    DOCUMENT_SYSTEM,
    DOCUMENT_USER,
    SECTION_SUMMARY_USER,
    SUMMARY_SCHEMA,
    clip,
)

TITLE_CHARS = 200
CONTEXT_CHARS = 400


def document_job(doc: ParsedDocument, file: FileInfo, budget: int) -> Job:
    """The request for a document's title and one-sentence summary."""
    title = own_title(doc)
    user = DOCUMENT_USER.format(
        file_name=PurePosixPath(file.rel_path).name,
        title_line=f"Title: {title}\n" if title else "",
        text=clip(doc.text, budget),
    )
    return Job(
        "document",
        [{"role": "system", "content": DOCUMENT_SYSTEM}, {"role": "user", "content": user}],
        schema=DOCUMENT_SCHEMA,
        schema_name="document_context",
        max_tokens=200,
    )


def section_summary_job(title: str, section: Section, text: str, budget: int) -> Job:
    """The request for one section's one-sentence summary."""
    user = SECTION_SUMMARY_USER.format(
        title=title, section=section.path or section.title or "(untitled)", text=clip(text, budget)
    )
    return Job(
        "section_summary",
        [{"role": "user", "content": user}],
        schema=SUMMARY_SCHEMA,
        schema_name="section_summary",
        max_tokens=120,
    )


def chunk_context_job(document: str, chunk: str, budget: int) -> Job:
    """The contextual-retrieval request: situate ``chunk`` in its (clipped) document."""
    user = CHUNK_CONTEXT_USER.format(document=clip(document, budget), chunk=chunk)
    return Job("chunk_context", [{"role": "user", "content": user}], max_tokens=150)


def _field(answer, name: str) -> str:
    value = answer.get(name) if isinstance(answer, dict) else None
    return " ".join(value.split()) if isinstance(value, str) else ""


def document_contexts(
    items: list[tuple[FileInfo, ParsedDocument, str, str]], runtime, budget: int
) -> list[tuple[str, str]]:
    """``(title, summary)`` per document; ``items`` carry the rule-based title and summary to keep on failure."""
    answers = runtime.run([document_job(doc, file, budget) for file, doc, _, _ in items])
    out = []
    for (file, doc, title, summary), answer in zip(items, answers):
        model_title, model_summary = _field(answer, "title"), _field(answer, "summary")
        if isinstance(answer, LLMFailure) or not (model_title or model_summary):
            runtime.note_fallback(
                file.path, "document", None, answer.error if isinstance(answer, LLMFailure) else "no title or summary"
            )
            out.append((title, summary))
            continue
        if not own_title(doc) and model_title:
            title = model_title[:TITLE_CHARS]
        out.append((title, clean_summary(model_summary) or summary))
    return out


def section_summaries(
    items: list[tuple[FileInfo, ParsedDocument, str, list[Section]]], runtime, budget: int
) -> list[list[Section]]:
    """Each document's sections with ``summary`` set where the model gave one."""
    jobs, where = [], []
    for d, (_file, doc, title, sections) in enumerate(items):
        for s in sections:
            jobs.append(section_summary_job(title, s, doc.text[s.start : s.end], budget))
            where.append((d, s.index))
    answers = runtime.run(jobs)
    summaries: dict[tuple[int, int], str] = {}
    failed: dict[int, str] = {}
    for (d, index), answer in zip(where, answers):
        text = clean_summary(_field(answer, "summary"))
        if text:
            summaries[(d, index)] = text
        else:
            failed.setdefault(d, answer.error if isinstance(answer, LLMFailure) else "no summary")
    for d, error in failed.items():
        runtime.note_fallback(items[d][0].path, "section_summary", None, error)
    return [
        [_with_summary(s, summaries.get((d, s.index), s.summary)) for s in sections]
        for d, (_, _, _, sections) in enumerate(items)
    ]


def _with_summary(section: Section, summary: str | None) -> Section:
    return replace(section, summary=summary)


def chunk_contexts(items: list[tuple[FileInfo, ParsedDocument, list[Chunk]]], runtime, budget: int) -> list[list[str]]:
    """One context line per chunk ("" where the model gave none)."""
    jobs = [chunk_context_job(doc.text, c.text, budget) for _, doc, chunks in items for c in chunks]
    answers = iter(runtime.run(jobs))
    out = []
    for file, _, chunks in items:
        lines, error = [], None
        for _ in chunks:
            answer = next(answers)
            if isinstance(answer, LLMFailure):
                error = error or answer.error
                lines.append("")
            else:
                lines.append(clean_summary(answer, CONTEXT_CHARS))
        if error:
            runtime.note_fallback(file.path, "chunk_context", None, error)
        out.append(lines)
    return out


@CONTEXT_WRITERS.register("llm")
def _llm(fields: tuple[str, ...] = DEFAULT_FIELDS) -> ContextWriter:
    """``--context llm``: the rules writer, whose titles and summaries :func:`document_contexts`
    and :func:`section_summaries` replace where the run's LLM answered."""
    return CONTEXT_WRITERS.get("rules")(fields)
