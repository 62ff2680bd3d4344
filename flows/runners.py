"""Task runners: where a run's batches execute (``--runner``, ``$QUARRY_RUNNER``).

========== ===================================================================================
threads    Prefect's ``ThreadPoolTaskRunner`` in the flow's process (the default). Parsing PDFs
           and other heavy formats fans out to a process pool inside the task, the ONNX model
           runs on its own threads; a batch parses while the one before it embeds.
processes  Prefect's ``ProcessPoolTaskRunner``: ``workers`` processes on this machine.
dask       ``prefect-dask``'s ``DaskTaskRunner``: a ``LocalCluster`` for the run (``workers``
           processes, one thread each), or the scheduler at ``$QUARRY_DASK_ADDRESS``.
ray        ``prefect-ray``'s ``RayTaskRunner`` (``pip install 'quarry[ray]'``): a local Ray,
           or the cluster at ``$QUARRY_RAY_ADDRESS``.
========== ===================================================================================

Whatever the runner, the flow's process keeps the writer: tasks take and return plain data
(files, settings, records, arrays), the flow streams their results into the one writer and
keeps at most :attr:`RunnerPlan.in_flight` batches between submission and load.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass

from quarry.core.errors import ConfigError
from quarry.core.settings import Settings, parse_workers

FILES_PER_BATCH = 64


def cpus() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class RunnerPlan:
    """How a run spreads its batches (plain data; logged and recorded with the run)."""

    name: str  # threads, processes, dask, ray
    workers: int  # worker processes; for threads, batches per stage at once
    in_flight: int  # batches between submission and load, at most (bounds the flow's memory)
    parse_workers: int  # processes a process task may use for PDFs and other heavy formats
    embed_threads: int  # threads of a local model in each worker; 0 = one per CPU
    files_per_batch: int


def plan_runner(settings: Settings) -> RunnerPlan:
    """How a run with ``settings`` spreads its batches.

    threads: each stage already spreads over the CPUs (the parse pool, the model's threads), so
    one batch per stage at a time (``workers`` = 1) and two in flight: the next batch parses
    while this one embeds. Distributed runners: one worker process per CPU by default, each
    parsing its batch in its own thread and embedding with its share of the CPUs.

    Batches hold the same files whatever the runner, so that every runner embeds the same texts
    in the same model calls: the int8 model quantises each call's activations with one scale,
    so a vector can move (slightly) with the texts it was embedded beside.
    """
    if settings.runner == "threads":
        workers = settings.workers or 1
        return RunnerPlan(
            "threads", workers, 2 * workers, parse_workers(settings), settings.embed_threads, FILES_PER_BATCH
        )
    remote = (settings.runner == "dask" and settings.dask_address) or (
        settings.runner == "ray" and settings.ray_address
    )
    workers = settings.workers or cpus()
    threads = settings.embed_threads or (0 if remote else max(1, cpus() // workers))
    return RunnerPlan(settings.runner, workers, 2 * workers, 1, threads, FILES_PER_BATCH)


def task_settings(settings: Settings, plan: RunnerPlan) -> Settings:
    """The settings a batch's tasks run with: the worker's share of the model's threads, and of
    the LLM's concurrency and rate limit (both are totals over the run's batches in flight)."""
    share = {"embed_threads": plan.embed_threads}
    if settings.uses_llm:
        share["llm_concurrency"] = max(1, settings.llm_concurrency // plan.in_flight)
        if settings.llm_rate_limit:
            share["llm_rate_limit"] = max(1, settings.llm_rate_limit // plan.in_flight)
    return settings.model_copy(update=share)


def _local_dask_cluster(**kwargs):
    """A ``LocalCluster`` whose workers may start processes (the parse pool keeps its per-file timeout).

    The scheduler and nannies live in this process and log every worker's start and stop at INFO
    through Prefect's console handler; quarry reports the run itself, so they log errors only
    (unless quarry's own log level is debug).
    """
    import dask
    from distributed import LocalCluster

    if not logging.getLogger("quarry").isEnabledFor(logging.DEBUG):
        logging.getLogger("distributed").setLevel(logging.ERROR)
    with dask.config.set({"distributed.worker.daemon": False}):
        return LocalCluster(**kwargs)


def task_runner(settings: Settings, plan: RunnerPlan):
    """A Prefect task runner for ``plan``; enter it (``with``) to start it."""
    if plan.name == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=plan.in_flight)
    if plan.name == "processes":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=plan.workers)
    if plan.name == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as exc:
            raise ConfigError(
                "--runner dask needs prefect-dask: pip install prefect-dask (it is in requirements.lock)"
            ) from exc
        if settings.dask_address:
            return DaskTaskRunner(address=settings.dask_address)
        return DaskTaskRunner(
            cluster_class=_local_dask_cluster,
            cluster_kwargs={
                "n_workers": plan.workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": None,
                "silence_logs": logging.ERROR,
            },
        )
    if plan.name == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as exc:
            raise ConfigError("--runner ray needs prefect-ray and ray: pip install 'quarry[ray]'") from exc
        # ray.init forks and at once execs its daemons; LanceDB, loaded here, warns about any fork.
        warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)
        if settings.ray_address:
            return RayTaskRunner(address=settings.ray_address)
        return RayTaskRunner(init_kwargs={"num_cpus": plan.workers, "include_dashboard": False, "log_to_driver": False})
    raise ConfigError(f"unknown task runner {plan.name!r}")
