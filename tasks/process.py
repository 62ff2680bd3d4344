"""Parse, section, contextualise and chunk a batch of files."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.core.models import LLM_COUNTERS, FileInfo
from quarry.core.settings import Settings
from quarry.ingest import process


@task(name="process-files", cache_policy=NO_CACHE)
def process_batch(
    items: list[tuple[FileInfo, str]], settings: Settings, workers: int = 1, store: str | None = None
) -> process.ProcessedBatch:
    """:func:`quarry.ingest.process.process_batch` as a task: plain data in and out, so it runs in
    a thread of the flow's process or in a Dask or Ray worker alike.

    Parsing is deterministic, so no retries: a file that fails here fails the same way again.
    LLM requests retry inside the batch's runtime (429/5xx/timeouts only); what still fails falls
    back to local rules, so a task retry would only repeat paid calls.
    """
    batch = process.process_batch(items, settings, workers=workers, store=store)
    chunks = sum(len(r.chunks) for r in batch.records)
    logger = get_run_logger()
    logger.info(
        "processed %d files into %d chunks (%d failed, %d empty)",
        len(items),
        chunks,
        len(batch.errors),
        len(batch.empty),
    )
    if batch.llm:
        logger.info(
            "LLM: %d calls, %d answers from cache, %d prompt + %d completion tokens, %d fallbacks",
            *(batch.llm[k] for k in LLM_COUNTERS),
            len(batch.llm["llm_fallback_windows"]),
        )
    return batch
