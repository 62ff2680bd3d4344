"""Parse, section, write context and chunk a batch of files.

PDF parsing is CPU-bound (pypdf, 0.05-0.3 s a page), so PDFs and DOCX files go to a process
pool; light text formats are parsed in the calling thread, where a pool would cost more
than it saves. LLM work (sectioning windows, titles and summaries) is I/O-bound and runs in
the process that runs the batch, one stage at a time over the whole batch so that the
requests of every file share one bounded thread pool (see :mod:`quarry.ingest.llm.client`).

:func:`process_batch` is the stage as a task runs it: plain data in (files, settings), plain
data out (:class:`ProcessedBatch`), so that it runs in a thread of the flow's process or in a
Dask or Ray worker alike.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from quarry.core import faults
from quarry.core.environment import environment
from quarry.core.errors import ParseError, QuarryError, UnsupportedFile
from quarry.core.models import (
    Chunk,
    DocumentRecord,
    FileError,
    FileInfo,
    ParsedDocument,
    StageClock,
    join_header,
    text_hash,
)
from quarry.ingest.chunking import chunk_document
from quarry.ingest.context import compose_header, get_context_writer, header_fields, place_lines
from quarry.ingest.parsers import BY_TYPE, parse_data, parse_file
from quarry.ingest.parsers.archive import read_members, split_member
from quarry.ingest.sectioning import get_sectioner
from quarry.ingest.sources import Fetched, fetch_many, is_object, open_object
from quarry.retrieval.corpus.signals import record_signals


def _parse_one(
    path: str, file_type: str, ocr: bool = True, data: bytes | None = None, digest: str | None = None
) -> ParsedDocument | str:
    """Parse in a worker; errors come back as a string so they cross the process boundary.

    ``data`` and ``digest``: the bytes of an archive member or an object, read by the batch
    (``_read_members``, ``_read_objects``); ``digest`` alone: the file at ``path`` holds an object
    spilled to disk, stamped with the object's identity rather than the file's hash."""
    # pypdf logs every repair it makes to a damaged file; the run reports real failures itself
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        if data is None and digest is not None:
            from quarry.core.safeio import read_regular
            from quarry.ingest.parsers import max_file_bytes

            data = read_regular(path, limit=max_file_bytes())[0]
        if data is not None:
            return parse_data(data, file_type, digest, ocr=ocr)
        return parse_file(path, file_type, ocr=ocr)
    except (ParseError, UnsupportedFile) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not take the batch down
        return f"{type(exc).__name__}: {exc}"


def _read_members(files: list[FileInfo], results: list) -> dict[int, tuple[bytes, str]]:
    """The bytes and identity of each archive member among ``files``, one pass per archive; a
    member that cannot be read gets its reason in ``results``. Plain bytes, so a member parses in
    the process pool like a file (the per-file timeout holds) and in any task runner's worker.
    An archive on object storage is read once for the batch (spilled to a temporary file if large)."""
    by_archive: dict[str, dict[tuple[str, ...], int]] = {}
    for i, f in enumerate(files):
        if f.archive:
            by_archive.setdefault(f.archive, {})[tuple(split_member(f.path, f.archive))] = i
    out: dict[int, tuple[bytes, str]] = {}
    for archive, members in by_archive.items():
        names = [list(n) for n in members]
        try:
            with _archive_source(archive) as source:
                for names_read, data, digest in read_members(archive, names, source=source):
                    i = members[tuple(names_read)]
                    if isinstance(data, bytes):
                        out[i] = (data, digest)
                    else:
                        results[i] = str(data)
        except ParseError as exc:  # an archive object that could not be read: each member's failure
            for i in members.values():
                results[i] = str(exc)
    return out


@contextmanager
def _archive_source(archive: str):
    """A file object over an archive on object storage for the block, or None for one on disk."""
    if not is_object(archive):
        yield None
        return
    with open_object(archive) as (fh, _identity):
        yield fh


def _read_objects(
    files: list[FileInfo], results: list, members: dict[int, tuple[bytes, str]]
) -> tuple[dict[int, Fetched], dict[int, dict[str, str]]]:
    """Read the batch's objects (files on object storage; archive members aside), a few at a time.

    A small object joins ``members`` as ``(bytes, identity)``; a large one comes back spilled to a
    temporary file (``{index: Fetched}``, which the caller discards); one that cannot be read
    gets its reason in ``results``. Also returns each object's metadata (content type, user
    metadata), which joins the document's."""
    from quarry.ingest.parsers import max_file_bytes

    todo = {f.path: i for i, f in enumerate(files) if not f.archive and results[i] is None and is_object(f.path)}
    if todo:
        faults.point("before-read")
    spilled: dict[int, Fetched] = {}
    meta: dict[int, dict[str, str]] = {}
    for url, got in fetch_many(todo, limit=max_file_bytes()):
        i = todo[url]
        if isinstance(got, ParseError):
            results[i] = str(got)
            continue
        meta[i] = got.metadata
        if got.path is None:
            members[i] = (got.data or b"", got.identity)
        else:
            spilled[i] = got
    return spilled, meta


def parse_files(
    files: list[FileInfo], workers: int = 1, timeout: float = 120, ocr: bool = True, page_workers: int | None = None
) -> list[ParsedDocument | str]:
    """Parse ``files``; each result is a document or the reason it could not be read.

    Heavy formats (PDF, Office, images: CPU-bound, OCR) parse in a process pool, even one file, each
    under a CPU budget (:func:`_parse_heavy`): a parser that never returns is stopped there.
    ``page_workers``: processes that read the page text of each long PDF
    (:func:`quarry.ingest.parsers.pdf.split_pages`); by default the workers the batch's heavy
    files leave spare, ``workers // heavy files``, so a lone long PDF is read on every core.
    Members of archives are read first, each archive once (``_read_members``), and objects on
    object storage a few at a time (``_read_objects``), then parsed as files.
    """
    results: list[ParsedDocument | str | None] = [None] * len(files)
    members = _read_members(files, results)
    spilled, object_meta = _read_objects(files, results, members)
    kinds = [f.file_type for f in files]
    # where each file's bytes are: its path, or the temporary file an object was spilled to
    paths = [f.path for f in files]
    for i, got in spilled.items():
        assert got.path is not None  # spilled: what _read_objects wrote to a file
        paths[i] = got.path
    stamps = {i: got.identity for i, got in spilled.items()}

    def source(i: int) -> tuple:
        return (paths[i], kinds[i], ocr, *members.pop(i, (None, stamps.get(i))))

    try:
        _convert_legacy(files, results, members, kinds, timeout, paths, stamps)
        heavy = [
            i
            for i, f in enumerate(files)
            if (fmt := BY_TYPE.get(f.file_type)) is not None and fmt.heavy and results[i] is None
        ]
        if heavy and not _daemonic():  # even one file: only a worker can be stopped when its parser never returns
            _parse_heavy({i: source(i) for i in heavy}, results, workers, timeout, page_workers)
        for i in range(len(files)):
            if results[i] is None:
                results[i] = _parse_one(*source(i))
    finally:
        for got in spilled.values():
            got.discard()
    for i, meta in object_meta.items():
        doc = results[i]
        if meta and isinstance(doc, ParsedDocument):  # the document's own metadata wins a clash
            doc.metadata = {**meta, **doc.metadata}
    return results  # type: ignore[return-value]


WALL_FACTOR = 10  # a parse that runs this many times its CPU budget in wall time is stuck (asleep, blocked)
RETRY_FACTOR = 4  # a file over its CPU budget is parsed again alone, with this many times the budget


class _OverBudget(BaseException):
    """Raised in a pool worker when a parse has used its CPU budget (a BaseException, so that no
    parser's ``except Exception`` swallows it)."""


_OVER_BUDGET = "\0over-budget"  # a worker's answer: the parse used its CPU budget
_DIED = "\0worker-died"  # the pool's worker ended during the parse
_RETRY = (_OVER_BUDGET, _DIED)


def _on_budget(signum, frame):
    raise _OverBudget


@contextmanager
def _cpu_budget(budget: float):
    """Raise :class:`_OverBudget` in the block once this process has used ``budget`` more seconds of CPU.

    The budget counts this process's own CPU time (``ITIMER_PROF``: every thread, user and
    system), not the wall clock, so a neighbour that keeps the cores busy does not make a file
    fail. The timer's signal stops code that runs Python; code spinning inside a C library
    never returns to Python, and meets ``RLIMIT_CPU`` at twice the budget, where the kernel ends
    the process (its pool then reports it died). Main thread only (signals)."""
    import resource
    import signal

    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    ceiling = int(spent + 2 * budget) + 2
    if soft != resource.RLIM_INFINITY:
        ceiling = min(ceiling, soft)
    previous = signal.signal(signal.SIGPROF, _on_budget)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (ceiling, hard))
        signal.setitimer(signal.ITIMER_PROF, budget)
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _budgeted(budget: float, fn, *args):
    """``fn(*args)`` under a CPU budget of ``budget`` seconds (:func:`_cpu_budget`): how a PDF's page
    helper (:func:`quarry.ingest.parsers.pdf.split_pages`) runs its part. Over budget, the helper's
    :class:`_OverBudget` reaches the parse that started it, which is then over budget too."""
    with _cpu_budget(budget):
        return fn(*args)


def _parse_budgeted(budget: float, *source, page_workers: int = 1, level: int = logging.WARNING) -> tuple:
    """:func:`_parse_one` in a pool worker under a CPU-time budget of ``budget`` seconds
    (:func:`_cpu_budget`); a long PDF's pages are read by ``page_workers`` processes, each helper
    under a budget of its own.

    Returns the result and the worker's log records at ``level`` and above (the pool's caller's
    level), which the caller logs: a spawned worker has no handlers of its own."""
    from functools import partial

    from quarry.ingest.parsers.pdf import split_pages

    with _kept_records(level) as records:
        try:
            with _cpu_budget(budget), split_pages(page_workers, partial(_budgeted, budget)):
                result: ParsedDocument | str = _parse_one(*source)
        except _OverBudget:
            result = _OVER_BUDGET
    return result, records


@contextmanager
def _kept_records(level: int):
    """The records quarry's loggers emit in the block at ``level`` and above, made picklable: the
    message formatted (a traceback included), plain values only (an ``extra`` that cannot be
    pickled must not cost the parse its result)."""
    from logging.handlers import QueueHandler

    records: list[logging.LogRecord] = []
    plain = (str, int, float, bool, type(None))

    class _Keep(QueueHandler):
        def enqueue(self, record: logging.LogRecord) -> None:
            records.append(logging.makeLogRecord({k: v for k, v in vars(record).items() if isinstance(v, plain)}))

    root = logging.getLogger("quarry")
    handler, before = _Keep(None), root.level  # type: ignore[arg-type]
    handler.setLevel(level)
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        root.setLevel(before)


def _parse_heavy(
    sources: dict[int, tuple], results: list, workers: int, budget: float, page_workers: int | None = None
) -> None:
    """Parse the files ``sources`` (index: :func:`_parse_one`'s arguments) in a process pool, each under a CPU budget of
    ``budget`` seconds (``QUARRY_PARSE_TIMEOUT``) and a wall-clock backstop of
    :data:`WALL_FACTOR` times that for a parser that is stuck without using CPU.

    Each long PDF's pages are read by ``page_workers`` processes (its worker and spawned helpers,
    each under the budget), by default ``workers // len(sources)``: the cores the other files leave.
    A file over its CPU budget (or a helper of it), or whose worker died (out of memory; the CPU
    ceiling; a crash in a C library — which also ends the pool's other parses), is parsed once more
    alone, in a pool of its own, with :data:`RETRY_FACTOR` times the budget (and by default
    ``workers`` page processes), before it is reported."""
    ctx = multiprocessing.get_context("spawn")  # fork is unsafe under Prefect's threads
    first = page_workers or max(1, workers // len(sources))
    again = _run_pool(list(sources), sources, results, max(1, min(workers, len(sources))), budget, ctx, first)
    for i in again:
        _run_pool([i], sources, results, 1, budget * RETRY_FACTOR, ctx, page_workers or max(1, workers))
        if results[i] == _OVER_BUDGET:
            results[i] = (
                f"parsing used more than {budget:.0f} s of CPU, and more than "
                f"{budget * RETRY_FACTOR:.0f} s when parsed again alone (QUARRY_PARSE_TIMEOUT raises it)"
            )
        elif results[i] == _DIED:
            results[i] = (
                "the parser process died, also when the file was parsed again alone (out of memory, "
                f"more than {2 * budget * RETRY_FACTOR:.0f} s of CPU, or a crash in a library)"
            )


def _run_pool(
    indices: list[int],
    sources: dict[int, tuple],
    results: list,
    workers: int,
    budget: float,
    ctx,
    page_workers: int = 1,
) -> list[int]:
    """One pool over ``indices``; returns those to parse again alone (over budget, worker died)."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    level = logging.getLogger("quarry").getEffectiveLevel()
    futures = {
        i: pool.submit(_parse_budgeted, budget, *sources[i], page_workers=page_workers, level=level) for i in indices
    }
    wall = budget * WALL_FACTOR
    hung, again = False, []
    for i, fut in futures.items():
        try:
            results[i], records = fut.result(timeout=wall)
            for record in records:
                logging.getLogger(record.name).handle(record)
        except FutureTimeout:
            results[i] = (
                f"parsing took longer than {wall:.0f} s of wall time, {WALL_FACTOR} times its CPU "
                "budget (QUARRY_PARSE_TIMEOUT): the parser looks stuck"
            )
            hung = True
        except Exception:  # noqa: BLE001 - the worker died (BrokenProcessPool): out of memory, the CPU ceiling, a C crash
            results[i] = _DIED
        if results[i] in _RETRY:
            again.append(i)
    if hung:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
    pool.shutdown(wait=not hung, cancel_futures=True)
    return again


def _convert_legacy(
    files: list[FileInfo],
    results: list,
    members: dict[int, tuple[bytes, str]],
    kinds: list[str],
    timeout: float,
    paths: list[str] | None = None,
    stamps: dict[int, str] | None = None,
) -> None:
    """Convert the legacy DOC and PPT files of a batch with one LibreOffice call (its start is most of
    a conversion's cost); each converted file then parses as the DOCX or PPTX it became (``kinds[i]``,
    ``members[i]`` with the original's digest). Files it did not convert take the usual path."""
    from quarry.core.safeio import read_regular
    from quarry.ingest.parsers import max_file_bytes
    from quarry.ingest.parsers.legacy import CONVERTED, convert_many, needs_conversion, soffice, target_of

    todo = [i for i, f in enumerate(files) if f.file_type in CONVERTED and results[i] is None]
    if len(todo) < 2 or soffice() is None:
        return  # one file: converted in the pool like any other parse
    items, digests = [], {}
    for i in todo:
        try:
            data, digest = (
                members[i]
                if i in members
                else read_regular(paths[i] if paths else files[i].path, limit=max_file_bytes())
            )
            digest = (stamps or {}).get(i, digest)
        except ParseError:
            continue  # the usual path reads it again and names the cause
        if needs_conversion(data, files[i].file_type):
            items.append((str(i), data, files[i].file_type))
            digests[i] = digest
    for key, converted in convert_many(items, max(1, int(timeout))).items():
        i = int(key)
        members[i], kinds[i] = (converted, digests[i]), target_of(files[i].file_type)


def _daemonic() -> bool:
    """Whether this process may not start children: a daemonic worker (Dask's default for the
    workers of a cluster quarry did not start itself). Its files are parsed in the calling
    thread, without the per-file timeout; the Dask cluster a run starts has non-daemonic workers."""
    if multiprocessing.current_process().daemon:
        logging.getLogger("quarry").warning(
            "parsing in a daemonic worker process: no per-file timeout (start Dask workers with "
            "distributed.worker.daemon: false to keep it)"
        )
        return True
    return False


def local_sectioner(settings, name: str | None = None):
    """The sectioner that needs no LLM: ``settings.sectioner`` (``structure`` under ``llm``)."""
    name = name or ("structure" if settings.sectioner == "llm" else settings.sectioner)
    embed = None
    if name == "semantic":
        from quarry.ingest.embedders import get_embedder

        embed = get_embedder(settings).embed  # the run's own embedder, cached per process
    return get_sectioner(
        name,
        settings.max_section,
        embed=embed,
        min_section=settings.min_section,
        percentile=settings.semantic_percentile,
    )


def build_record(file: FileInfo, doc_id: str, parsed: ParsedDocument, settings, tokenizer=None) -> DocumentRecord:
    """Section, write headers and chunk one parsed document with local rules (no LLM)."""
    records, errors = build_records([(file, doc_id, parsed)], settings, tokenizer)
    if errors:
        raise QuarryError(errors[0].error)
    return records[0]


def _guard(errors: dict[int, str], i: int, fn, *args):
    """``fn(*args)``, or None with the error kept for document ``i``: one bad document never stops a batch."""
    try:
        return fn(*args)
    except QuarryError as exc:
        errors[i] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a parser or chunker bug costs its document, never the batch
        errors[i] = f"{type(exc).__name__}: {exc}"
    return None


def build_records(
    docs: list[tuple[FileInfo, str, ParsedDocument]],
    settings,
    tokenizer=None,
    llm=None,
    clock: StageClock | None = None,
) -> tuple[list[DocumentRecord], list[FileError]]:
    """Section, contextualise and chunk a batch of parsed documents.

    Stage by stage over the whole batch, so that the LLM requests of every document (when
    ``llm``, an :class:`~quarry.ingest.llm.LLMRuntime`, is given) are answered concurrently.
    ``clock`` receives the time of the ``section``, ``context`` and ``chunk`` stages.
    """
    clock = clock if clock is not None else StageClock()
    t = time.perf_counter()
    failed: dict[int, str] = {}
    local = local_sectioner(settings)
    sections = [_guard(failed, i, local.sections, doc) for i, (_, _, doc) in enumerate(docs)]
    alive = [i for i in range(len(docs)) if i not in failed]
    if settings.sectioner == "llm" and llm is not None and alive:
        from quarry.ingest.llm.sections import section_batch

        found_sections = section_batch(
            [(docs[i][0].path, docs[i][2]) for i in alive], [sections[i] for i in alive], llm, settings.llm_window_chars
        )
        for i, secs in zip(alive, found_sections):
            sections[i] = secs

    t = _lap(clock, "section", t, sum(len(sections[i]) for i in alive))
    fields = header_fields(settings)
    writer = get_context_writer(settings.context, fields)
    contexts = {i: _guard(failed, i, writer.document_context, docs[i][2], docs[i][0], sections[i]) for i in alive}
    alive = [i for i in alive if i not in failed]
    if settings.context == "llm" and llm is not None and alive:
        from quarry.ingest.llm.context import document_contexts

        found_contexts = document_contexts(
            [(docs[i][0], docs[i][2], *contexts[i]) for i in alive], llm, settings.llm_input_tokens
        )
        contexts.update(zip(alive, found_contexts))
    if "section_summary" in fields and alive:
        if settings.context == "llm" and settings.llm_section_summaries and llm is not None:
            from quarry.ingest.llm.context import section_summaries

            summarised = section_summaries(
                [(docs[i][0], docs[i][2], contexts[i][0], sections[i]) for i in alive], llm, settings.llm_input_tokens
            )
            for i, secs in zip(alive, summarised):
                sections[i] = secs
        else:
            # not part of the ContextWriter protocol (document_context and header): a plugin's writer
            # without it leaves the sections unsummarised rather than failing the batch
            summary_of = getattr(writer, "section_summary", None)
            for i in alive:
                sections[i] = [
                    replace(s, summary=s.summary or (summary_of(docs[i][2], s) if summary_of else None) or None)
                    for s in sections[i]
                ]

    t = _lap(clock, "context", t, len(alive))

    def cut(i: int, doc, headers: list[str]):
        return chunk_document(
            docs[i][1],
            doc,
            sections[i],
            headers,
            size=settings.chunk_size,
            overlap=settings.chunk_overlap,
            min_chunk=settings.min_chunk,
            count_tokens=tokenizer.count_tokens if tokenizer else None,
            max_tokens=tokenizer.max_tokens if tokenizer else 0,
            place=place_lines(doc, fields),
        )

    chunks = {}
    for i in alive:
        (title, summary), doc = contexts[i], docs[i][2]
        headers = [writer.header(title, summary, s) for s in sections[i]]
        chunks[i] = _guard(failed, i, cut, i, doc, headers)
    alive = [i for i in alive if i not in failed]
    if "chunk_context" in fields and llm is not None and alive:
        from quarry.ingest.llm.context import chunk_contexts

        found_lines = chunk_contexts(
            [(docs[i][0], docs[i][2], chunks[i]) for i in alive], llm, settings.llm_input_tokens
        )
        for i, lines in zip(alive, found_lines):
            title, summary = contexts[i]
            by_index = {s.index: s for s in sections[i]}
            place = place_lines(docs[i][2], fields)
            for chunk, line in zip(chunks[i], lines):
                if line:
                    section = by_index[chunk.section_index]
                    where = place(section, chunk.start, chunk.end) if place else ""
                    chunk.header = "\n".join(
                        p for p in (compose_header(fields, title, summary, section, line), where) if p
                    )
            _recount(chunks[i], tokenizer)

    doc_signals = {i: _guard(failed, i, add_signals, docs[i][2].text, chunks[i]) for i in alive}
    alive = [i for i in alive if i not in failed]
    _lap(clock, "chunk", t, sum(len(chunks[i]) for i in alive))
    records = [
        DocumentRecord(
            doc_id=docs[i][1],
            file=docs[i][0],
            title=contexts[i][0],
            summary=contexts[i][1],
            sections=sections[i],
            chunks=chunks[i],
            metadata=dict(docs[i][2].metadata),
            n_pages=len(docs[i][2].page_offsets) or None,
            ocr_pages=docs[i][2].ocr_pages,
            ocr_seconds=docs[i][2].ocr_seconds,
            page_offsets=list(docs[i][2].page_offsets),
            ocr_page_numbers=list(docs[i][2].ocr_page_numbers),
            warnings=[*docs[i][2].warnings, *_truncation_warnings(chunks[i], tokenizer)],
            signals=doc_signals[i],
        )
        for i in alive
    ]
    return records, [FileError(docs[i][0].path, error) for i, error in sorted(failed.items())]


def add_signals(text: str, chunks: list[Chunk]) -> dict:
    """Set each chunk's corpus signals and return the document's (quarry/retrieval/corpus/signals.py);
    none with ``QUARRY_CORPUS_SIGNALS=0`` (their columns stay NULL)."""
    if not environment().corpus_signals:
        return {}
    doc, rows = record_signals(text, [c.text for c in chunks])
    for chunk, row in zip(chunks, rows):
        chunk.signals = row
    return doc


def _truncation_warnings(chunks: list[Chunk], tokenizer) -> list[str]:
    """One line per chunk the model reads only the start of (a chunk that could not be re-split to fit)."""
    limit = getattr(tokenizer, "max_tokens", 0) if tokenizer is not None else 0
    return [
        f"chunk {c.chunk_index}: {c.n_tokens} tokens, over the model's {limit}: its vector reads only the start"
        for c in chunks
        if c.truncated
    ]


def _lap(clock: StageClock, stage: str, started: float, rows: int) -> float:
    """Charge the time since ``started`` (``time.perf_counter()``) to ``stage``; returns now."""
    now = time.perf_counter()
    clock.add(stage, now - started, rows)  # a span that ends now
    return now


def _recount(chunks: list[Chunk], tokenizer) -> None:
    """Refresh hashes and token counts after headers changed (a header can push a chunk over the limit)."""
    for chunk in chunks:
        chunk.text_hash = text_hash(join_header(chunk.header, chunk.text))
    if tokenizer is not None and tokenizer.max_tokens:
        counts = tokenizer.count_tokens([c.embed_text for c in chunks])
        for chunk, n in zip(chunks, counts):
            chunk.n_tokens, chunk.truncated = n, n > tokenizer.max_tokens


def process_files(
    items: list[tuple[FileInfo, str]],
    settings,
    tokenizer=None,
    workers: int = 1,
    llm=None,
    clock: StageClock | None = None,
) -> tuple[list[DocumentRecord], list[FileError], list[FileInfo]]:
    """Turn ``(file, doc_id)`` pairs into records.

    Returns ``(records, errors, empty)``: files with no text at all are neither records nor
    errors; the caller counts them as skipped. ``llm`` is an
    :class:`~quarry.ingest.llm.LLMRuntime` when the settings ask for LLM sectioning or context.
    ``clock`` receives the time of the ``parse``, ``section``, ``context`` and ``chunk`` stages.
    """
    clock = clock if clock is not None else StageClock()
    files = [f for f, _ in items]
    with clock.timing("parse", len(files)):
        parsed = parse_files(files, workers=workers, timeout=settings.parse_timeout, ocr=settings.ocr)
    errors: list[FileError] = []
    empty: list[FileInfo] = []
    docs: list[tuple[FileInfo, str, ParsedDocument]] = []
    for (file, doc_id), result in zip(items, parsed):
        if not isinstance(result, str) and result.sha256 and result.sha256 != file.sha256:
            # Rewritten between discovery and parsing: store the hash of the bytes parsed, so the
            # catalog never pairs this text with another version's hash.
            file = replace(file, sha256=result.sha256)
        if isinstance(result, str):
            errors.append(FileError(file.path, result))
        elif not result.text.strip():
            empty.append(file)
        else:
            docs.append((file, doc_id, result))
    records, failed = build_records(docs, settings, tokenizer, llm, clock)
    return records, errors + failed, empty


@dataclass
class ProcessedBatch:
    """What the process stage returns for a batch of files: plain data, picklable.

    ``spans``/``rows``: when each stage ran for this batch (epoch seconds) and what it produced
    (parse, section, context, chunk; see :class:`~quarry.core.models.StageClock`); ``llm``: the
    LLM counters of this batch (``LLMRuntime.report()``), empty without LLM.
    """

    records: list[DocumentRecord]
    errors: list[FileError]
    empty: list[FileInfo]
    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    llm: dict = field(default_factory=dict)


def process_batch(
    items: list[tuple[FileInfo, str]], settings, workers: int = 1, store: str | None = None
) -> ProcessedBatch:
    """Parse, section, contextualise and chunk ``items`` in this process, from plain data alone.

    The token counter is this process's cached embedder (``get_embedder(settings)``), loaded once
    per worker. With LLM sectioning or context, an :class:`~quarry.ingest.llm.LLMRuntime` is made
    here for the batch: its answer cache is ``<store>/llm-cache.sqlite`` (SQLite in WAL mode, safe
    for several processes), so a Dask or Ray worker needs no live object from the flow.
    ``settings.llm_concurrency`` and ``llm_rate_limit`` apply to this batch (the flow gives each
    batch in flight its share).
    """
    from quarry.ingest.embedders import get_embedder

    clock = StageClock()
    llm = None
    if settings.uses_llm:
        from pathlib import Path

        from quarry.ingest.llm import LLMRuntime

        llm = LLMRuntime(settings, Path(store) if store else None)
    try:
        records, errors, empty = process_files(
            items, settings, tokenizer=get_embedder(settings), workers=workers, llm=llm, clock=clock
        )
        report = llm.report() if llm is not None else {}
    finally:
        if llm is not None:
            llm.close()
    return ProcessedBatch(records, errors, empty, dict(clock.spans), dict(clock.rows), report)


def content_fingerprint(settings) -> str:
    """Hash of the settings that shape sections and chunks (not the vectors).

    A store built with another fingerprint is re-processed in full (``tasks/discover.py``). The
    parsers' versions are not in it: a parser's new version re-parses its own format's documents
    only (:func:`recorded_versions`).
    """
    keys = ("sectioner", "context", "chunk_size", "chunk_overlap", "min_chunk", "max_section")
    shape = {k: getattr(settings, k) for k in keys}
    # Later settings join only when they differ from what older stores were built with, so
    # that upgrading quarry does not re-process an index whose contents cannot have changed.
    if settings.header_fields:
        shape["header_fields"] = list(settings.header_fields)
    if settings.sectioner == "semantic":
        shape.update(
            min_section=settings.min_section,
            semantic_percentile=settings.semantic_percentile,
            embed=[settings.embed_backend, settings.embed_model, settings.embed_dim],
        )
    if settings.uses_llm:
        from quarry.ingest.llm.prompts import PROMPT_VERSION

        shape.update(
            llm_model=settings.llm_model_name,
            llm_prompt_version=PROMPT_VERSION,
            llm_window_chars=settings.llm_window_chars,
            llm_input_tokens=settings.llm_input_tokens,
            llm_section_summaries=settings.llm_section_summaries,
            llm_chunk_context=settings.llm_chunk_context,
        )
    declared = getattr(settings, "fingerprint_options", None)
    options = declared() if declared else {}  # what the chosen components declared as shaping the index
    if options:
        shape["options"] = options
    blob = json.dumps(shape, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def recorded_versions() -> str:
    """The parsers' versions as a commit records them in the catalog's meta (``format_versions``):
    the next run parses again the documents of each format whose version differs
    (:func:`quarry.ingest.parsers.stale_formats`, quarry/ingest/plan.py, plan_run)."""
    from quarry.ingest.parsers import format_versions

    return json.dumps(format_versions(), sort_keys=True)
