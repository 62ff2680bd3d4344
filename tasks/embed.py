"""Embed a batch of chunks, reusing stored vectors."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from quarry.embedding import EmbedStats, embed_records
from quarry.models import DocumentRecord


@task(name="embed", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2),
      retry_jitter_factor=0.5)
def embed_batch(records: list[DocumentRecord], writer, embedder, budget_tokens: int) -> tuple[dict, EmbedStats]:
    vectors, stats = embed_records(records, embedder, lookup=writer.lookup_vectors, budget_tokens=budget_tokens)
    get_run_logger().info("embedded %d chunks in %d batches, reused %d stored vectors", stats.embedded,
                          stats.calls, stats.reused)
    return vectors, stats
