"""Embed the texts of a batch that the store has no vector for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from quarry.core.errors import EmbeddingError
from quarry.core.settings import Settings
from quarry.ingest.embedders import get_embedder
from quarry.ingest.embedding import EmbeddedTexts, embed_texts
from quarry.store import vectors
from quarry.store.handle import Store, as_store
from quarry.store.pointer import read_pointer


def _worth_retrying(task, task_run, state) -> bool:
    """Retry unexpected failures; an ``EmbeddingError`` has already been retried where that made
    sense (429/5xx/timeouts, inside the provider) or cannot succeed again (auth, validation)."""
    try:
        state.result()
    except EmbeddingError:
        return False
    except BaseException:  # noqa: BLE001 - any other failure of the task is worth another try
        return True
    return True


@task(
    name="embed",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_worth_retrying,
)
def embed_batch(texts: list[str], n_tokens: list[int], settings: Settings) -> EmbeddedTexts:
    """Embed ``texts`` with this process's cached model (``get_embedder``: a Dask or Ray worker
    loads it once). Only texts without a stored vector come here (see :class:`StoredVectors`)."""
    done = embed_texts(texts, get_embedder(settings), n_tokens, settings.embed_budget)
    get_run_logger().info("embedded %d texts in %d model calls", len(texts), done.calls)
    return done


class StoredVectors:
    """The committed vectors of one model, looked up by text hash in the flow's process.

    Lookups read the LanceDB table at the version ``CURRENT`` names, not the versions this run
    adds: what a batch sends to the model then depends on the committed store alone, never on
    which batch of the run happened to load first (batches run side by side).
    """

    def __init__(self, store: Store | Path, model: str, dim: int):
        store = as_store(store)
        pointer = read_pointer(store.folder)
        name = vectors.table_name(model, dim)
        self._table = None
        if pointer is not None and pointer.vector_table == name and pointer.vector_version:
            self._table = vectors.open_for_read(store, name, pointer.vector_version)

    def lookup(self, hashes: list[str]) -> dict[str, np.ndarray]:
        return vectors.lookup_vectors(self._table, hashes) if self._table is not None and hashes else {}
