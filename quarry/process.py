"""Parse, section, write context and chunk a batch of files.

PDF parsing is CPU-bound (pypdf, 0.05-0.3 s a page), so PDFs and DOCX files go to a process
pool; light text formats are parsed in the calling thread, where a pool would cost more
than it saves.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from quarry.chunking import chunk_document
from quarry.context import get_context_writer
from quarry.errors import ParseError, QuarryError, UnsupportedFile
from quarry.models import DocumentRecord, FileError, FileInfo, ParsedDocument
from quarry.parsers import parse_file
from quarry.sectioning import get_sectioner

HEAVY_TYPES = {"pdf", "docx"}


def _parse_one(path: str, file_type: str) -> ParsedDocument | str:
    """Parse in a worker; errors come back as a string so they cross the process boundary."""
    # pypdf logs every repair it makes to a damaged file; the run reports real failures itself
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        return parse_file(path, file_type)
    except (ParseError, UnsupportedFile) as exc:
        return str(exc)
    except Exception as exc:  # a parser bug must not take the batch down
        return f"{type(exc).__name__}: {exc}"


def parse_files(files: list[FileInfo], workers: int = 1, timeout: float = 120) -> list[ParsedDocument | str]:
    """Parse ``files``; each result is a document or the reason it could not be read."""
    results: list[ParsedDocument | str | None] = [None] * len(files)
    heavy = [i for i, f in enumerate(files) if f.file_type in HEAVY_TYPES]
    if workers > 1 and len(heavy) > 1:
        ctx = multiprocessing.get_context("spawn")  # fork is unsafe under Prefect's threads
        pool = ProcessPoolExecutor(max_workers=min(workers, len(heavy)), mp_context=ctx)
        futures = {i: pool.submit(_parse_one, files[i].path, files[i].file_type) for i in heavy}
        hung = False
        for i, fut in futures.items():
            try:
                results[i] = fut.result(timeout=timeout)
            except FutureTimeout:
                results[i] = f"parsing took longer than {timeout:.0f} s"
                hung = True
            except Exception as exc:  # a worker died (out of memory, a crash in a C library)
                results[i] = f"parser process failed: {type(exc).__name__}: {exc}"
        if hung:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
        pool.shutdown(wait=not hung, cancel_futures=True)
    for i, f in enumerate(files):
        if results[i] is None:
            results[i] = _parse_one(f.path, f.file_type)
    return results  # type: ignore[return-value]


def build_record(file: FileInfo, doc_id: str, parsed: ParsedDocument, settings, tokenizer=None) -> DocumentRecord:
    """Section, write headers and chunk one parsed document."""
    sections = get_sectioner(settings.sectioner, settings.max_section).sections(parsed)
    writer = get_context_writer(settings.context)
    title, summary = writer.document_context(parsed, file, sections)
    headers = [writer.header(title, summary, s) for s in sections]
    chunks = chunk_document(
        doc_id,
        parsed,
        sections,
        headers,
        size=settings.chunk_size,
        overlap=settings.chunk_overlap,
        min_chunk=settings.min_chunk,
        count_tokens=tokenizer.count_tokens if tokenizer else None,
        max_tokens=tokenizer.max_tokens if tokenizer else 0,
    )
    return DocumentRecord(
        doc_id=doc_id,
        file=file,
        title=title,
        summary=summary,
        sections=sections,
        chunks=chunks,
        metadata=dict(parsed.metadata),
        n_pages=len(parsed.page_offsets) or None,
    )


def process_files(
    items: list[tuple[FileInfo, str]], settings, tokenizer=None, workers: int = 1
) -> tuple[list[DocumentRecord], list[FileError], list[FileInfo]]:
    """Turn ``(file, doc_id)`` pairs into records.

    Returns ``(records, errors, empty)``: files with no text at all are neither records nor
    errors; the caller counts them as skipped.
    """
    files = [f for f, _ in items]
    parsed = parse_files(files, workers=workers, timeout=settings.parse_timeout)
    records: list[DocumentRecord] = []
    errors: list[FileError] = []
    empty: list[FileInfo] = []
    for (file, doc_id), result in zip(items, parsed):
        if isinstance(result, str):
            errors.append(FileError(file.path, result))
            continue
        if not result.text.strip():
            empty.append(file)
            continue
        try:
            records.append(build_record(file, doc_id, result, settings, tokenizer))
        except QuarryError as exc:
            errors.append(FileError(file.path, str(exc)))
        except Exception as exc:  # one bad document never stops the run
            errors.append(FileError(file.path, f"{type(exc).__name__}: {exc}"))
    return records, errors, empty
