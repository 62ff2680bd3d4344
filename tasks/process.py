"""Parse, section, contextualise and chunk a batch of files."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.core.models import DocumentRecord, FileError, FileInfo
from quarry.ingest.process import process_files


@task(name="process-files", cache_policy=NO_CACHE)
def process_batch(items: list[tuple[FileInfo, str]], settings, tokenizer, workers: int, llm=None
                  ) -> tuple[list[DocumentRecord], list[FileError], list[FileInfo]]:
    """Parsing is deterministic, so no retries: a file that fails here fails the same way again.

    LLM requests retry inside ``llm`` (429/5xx/timeouts only); what still fails falls back to
    local rules, so a task retry would only repeat paid calls.
    """
    before = llm.report() if llm is not None else None
    records, errors, empty = process_files(items, settings, tokenizer=tokenizer, workers=workers, llm=llm)
    chunks = sum(len(r.chunks) for r in records)
    logger = get_run_logger()
    logger.info("processed %d files into %d chunks (%d failed, %d empty)", len(items), chunks,
                len(errors), len(empty))
    if llm is not None:
        after = llm.report()
        logger.info("LLM: %d calls, %d answers from cache, %d prompt + %d completion tokens, %d fallbacks",
                    *(after[k] - before[k] for k in ("llm_calls", "llm_cached", "llm_prompt_tokens",
                                                     "llm_completion_tokens")),
                    len(after["llm_fallback_windows"]) - len(before["llm_fallback_windows"]))
    return records, errors, empty
