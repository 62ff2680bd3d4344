"""Parse, section, contextualise and chunk a batch of files."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.models import DocumentRecord, FileError, FileInfo
from quarry.process import process_files


@task(name="process-files", cache_policy=NO_CACHE)
def process_batch(items: list[tuple[FileInfo, str]], settings, tokenizer, workers: int
                  ) -> tuple[list[DocumentRecord], list[FileError], list[FileInfo]]:
    """Parsing is deterministic, so no retries: a file that fails here fails the same way again."""
    records, errors, empty = process_files(items, settings, tokenizer=tokenizer, workers=workers)
    chunks = sum(len(r.chunks) for r in records)
    get_run_logger().info("processed %d files into %d chunks (%d failed, %d empty)", len(items), chunks,
                          len(errors), len(empty))
    return records, errors, empty
