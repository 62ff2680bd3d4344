"""``quarry.index()``: index a tree in one call.

The one place that takes the writer lock, records a run that found the store busy, runs the
index flow with a Prefect API (the configured one, or a private server whose history lives in
the store) and returns the run's report. ``quarry index``, the first run of ``quarry serve``, a
notebook, an Airflow or Dagster task and the tests all call it; the CLI only renders what it
returns. A dry run needs no Prefect at all: it discovers and plans in this process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quarry.flows.preview import preview  # quarry.index(dry_run=True) and the flow's dry run

from quarry.core.errors import UsageError
from quarry.core.settings import Settings
from quarry.core.storeurl import root_path

__all__ = ["index", "preview", "serve", "SECRET_SETTINGS"]

# Settings passed to the flow through the environment, never as its parameters (Prefect records those).
SECRET_SETTINGS = {"llm_api_key": "QUARRY_LLM_API_KEY", "openai_api_key": "QUARRY_OPENAI_API_KEY"}


def index(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    db: str | os.PathLike | None = None,
    *,
    full: bool = False,
    dry_run: bool = False,
    if_busy: str = "fail",
    progress: bool = False,
    evaluate: dict | None = None,
    **settings,
) -> dict:
    """Index the files under ``paths`` into the store ``db`` (default ``$QUARRY_DB`` or ``./.quarry``).

    A path is a folder, a file, or a tree on object storage (``s3://bucket/prefix``,
    ``gs://bucket/prefix``, ``az://container/prefix``), read where it lives: its documents' paths are
    their URLs, and an unchanged object is never downloaded (docs/sources.md).

    Incremental: only what changed since the last commit is parsed and embedded, and the run
    becomes visible whole or not at all. ``full`` re-processes every file (vectors are still
    reused where the text is equal); ``dry_run`` returns what would be added, updated, moved and
    deleted, and what the deletion guard would stop, changing nothing; ``if_busy="skip"`` records a
    ``skipped`` run and returns instead of raising :class:`~quarry.core.errors.StoreLocked` when
    another run holds the store; ``progress`` shows a progress bar on standard error. ``settings``
    are :class:`~quarry.core.settings.Settings` fields (``include=("*.md",)``, ``allow_deletes=True``,
    ``embed_backend="hash"`` …) over ``QUARRY_*`` variables.

    ``evaluate``: score question sets of the store after the run and flag drops (``{"sets": [...],
    "margin": 0.05}``; see ``quarry.flows.index.index_flow``).

    Returns the run report: the fields of :class:`~quarry.core.models.RunReport` plus ``plan`` and
    ``rebuild`` (a dry run: ``plan``, ``files``, ``guard``). Raises
    :class:`~quarry.core.errors.RunRefused` when the deletion guard stops the run (nothing written).
    """
    roots = _roots(paths)
    config = Settings.from_env(**settings)  # usage errors before anything starts
    from quarry.store import journal
    from quarry.store.handle import open_store
    from quarry.store.layout import new_run_id

    store = open_store(db)  # opened once: the lock and the journal share it
    if dry_run:
        return preview(roots, store.folder, config, full=full)
    overrides = _public(settings)
    started = datetime.now(UTC).replace(tzinfo=None)
    # the busy check before Prefect starts (the flow's own, re-entrant, then finds the lock held here)
    lock, skipped = journal.hold_or_skip(store, if_busy, new_run_id(), started, roots, config.public_dict())
    if skipped is not None:
        return skipped
    assert lock is not None  # hold_or_skip gives the lock or the skipped row
    try:
        with _secrets(settings), _history(store.folder) as api:
            from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
            from quarry.flows.index import heartbeat_asked, index_flow

            from quarry.core import progress as bars

            bars.enable(progress)
            # Prefect reads PREFECT_API_URL once, when first imported: a second call in the same
            # process (a notebook, a scheduler's worker) must name this call's server itself
            try:
                updates: dict[Any, str | None] = {PREFECT_API_URL: api}
                if not heartbeat_asked():  # what the flow would set itself: one copy of the settings, not two
                    updates[PREFECT_FLOWS_HEARTBEAT_FREQUENCY] = None
                with temporary_settings(updates=updates):
                    return index_flow(roots, db=str(store.folder), full=full, overrides=overrides, evaluate=evaluate)
            finally:
                bars.enable(False)
    finally:
        lock.release()


def serve(
    paths,
    db: str | os.PathLike | None = None,
    *,
    cron: str,
    name: str | None = None,
    port: int | None = None,
    initial_run: bool = True,
    on_start=None,
    evaluate: dict | None = None,
    **settings,
) -> None:
    """Re-index ``paths`` into ``db`` on ``cron`` until SIGTERM or SIGINT (what ``quarry serve`` does).

    The first run starts at once (``initial_run=False``: at the first tick). Without
    ``PREFECT_API_URL`` a private Prefect server with its scheduler runs beside this process, on
    127.0.0.1 at ``port`` (default: a free one), its database under the store
    (``<store>/prefect/prefect.db``); one-shot :func:`index` calls on the same store use it while it
    runs. ``on_start(deployment, api_url)`` is called once the deployment is registered. A
    scheduled run that finds the store busy is recorded as ``skipped`` (unless the serve's own
    initial run holds it: that tick is only logged). ``evaluate``: each run is
    followed by the evaluation of these question sets (see :func:`index`).
    """
    roots = _roots(paths)
    Settings.from_env(**settings)  # usage errors before the server starts
    from quarry.store.handle import open_store

    store = open_store(db).folder
    overrides = _public(settings) or None
    from quarry.flows.orchestration import SERVER_FILE, prefect_api, schedule_seconds, serve_index, validate_cron

    with (
        _secrets(settings),
        prefect_api(
            store / "logs",
            services=True,
            database=store / "prefect" / "prefect.db",
            check=lambda: validate_cron(cron),
            port=port,
            announce=store / "prefect" / SERVER_FILE,
            metrics=(str(store), schedule_seconds(cron)),
        ) as url,
    ):
        serve_index(
            roots,
            store,
            cron,
            name=name,
            overrides=overrides,
            initial_run=initial_run,
            evaluate=evaluate,
            on_start=(lambda deployment: on_start(deployment, url)) if on_start else None,
        )


def _roots(paths) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    roots = [root_path(p) for p in paths]  # a folder, a file, or s3:// gs:// az:// URL
    if not roots:
        raise UsageError("nothing to index: give at least one path")
    return roots


def _secret_variables(settings: dict) -> dict[str, str]:
    """The keywords among ``settings`` that are secrets — quarry's API keys and the secret options
    of components (quarry.core.options) — with the variable each is read from."""
    from quarry.core.registry import declared_option

    out = {}
    for name, value in settings.items():
        if value is None:
            continue
        if name in SECRET_SETTINGS:
            out[name] = SECRET_SETTINGS[name]
        elif name not in Settings.model_fields:
            found = declared_option(name)
            if found is not None and found[0].secret:
                out[name] = found[0].variable
    return out


def _public(settings: dict) -> dict:
    """The keywords that may travel as flow parameters (Prefect records those): all but secrets."""
    secret = _secret_variables(settings)
    return {k: v for k, v in settings.items() if v is not None and k not in secret}


@contextlib.contextmanager
def _secrets(settings: dict) -> Iterator[None]:
    """Hand API keys and secret options given as keywords to the flow through the environment,
    for this call only."""
    saved = {}
    for name, var in _secret_variables(settings).items():
        if settings.get(name):
            saved[var] = os.environ.get(var)
            os.environ[var] = str(settings[name])
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


@contextlib.contextmanager
def _history(store: Path) -> Iterator[str]:
    """A Prefect API for the run: ``PREFECT_API_URL`` when set; else the private server of a
    ``quarry serve`` of this store, or one an earlier interactive run left for the next
    (``QUARRY_PREFECT_LINGER``), when one is running; else a private server of this call's own,
    its database under the store (``<store>/prefect/prefect.db``), so the run's history stays with
    the index it describes."""
    from quarry.flows.orchestration import SERVER_FILE, lease, linger_seconds, prefect_api, serving_api

    if os.environ.get("PREFECT_API_URL"):
        with prefect_api(store / "logs", check=_import_the_flow) as found:
            yield found
        return
    with lease(store):
        url = serving_api(store)
        if url is not None:
            os.environ["PREFECT_API_URL"] = url
            try:
                with prefect_api(store / "logs", check=_import_the_flow) as found:
                    yield found
            finally:
                os.environ.pop("PREFECT_API_URL", None)
            return
    linger = linger_seconds()
    with prefect_api(
        store / "logs",
        database=store / "prefect" / "prefect.db",
        check=_import_the_flow,
        announce=store / "prefect" / SERVER_FILE if linger else None,
        linger=linger,
    ) as found:
        yield found


def _import_the_flow() -> None:
    """Import the flow, LanceDB and FastAPI's encoder (about 2 s) while the private Prefect server
    starts (about 3 s): called once ``PREFECT_API_URL`` is set, before waiting for the server, so
    the two overlap. Python's collector is paused meanwhile (and then left as it was): the imports make hundreds of
    thousands of objects, none of them garbage, and each full collection would walk them all."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        import fastapi.encoders  # noqa: F401  (Prefect's, for the flow run's parameters: half a small run otherwise)
        import lancedb  # noqa: F401  (the writer's, imported on first use otherwise)
        import quarry.flows.index  # noqa: F401
    finally:
        if enabled:
            gc.enable()
