"""Embed a batch of chunks, reusing stored vectors."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from quarry.ingest.embedding import EmbedStats, embed_records
from quarry.core.errors import EmbeddingError
from quarry.core.models import DocumentRecord


def _worth_retrying(task, task_run, state) -> bool:
    """Retry unexpected failures; an ``EmbeddingError`` has already been retried where that made
    sense (429/5xx/timeouts, inside the provider) or cannot succeed again (auth, validation)."""
    try:
        state.result()
    except EmbeddingError:
        return False
    except BaseException:
        return True
    return True


@task(name="embed", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2),
      retry_jitter_factor=0.5, retry_condition_fn=_worth_retrying)
def embed_batch(records: list[DocumentRecord], writer, embedder, budget_tokens: int) -> tuple[dict, EmbedStats]:
    vectors, stats = embed_records(records, embedder, lookup=writer.lookup_vectors, budget_tokens=budget_tokens)
    get_run_logger().info("embedded %d chunks in %d batches, reused %d stored vectors", stats.embedded,
                          stats.calls, stats.reused)
    return vectors, stats
