"""Maintenance steps as Prefect tasks: each wraps one plain function of quarry/store/maintain.py.

Tasks get the store as a path string (plain, picklable data); the flow holds the writer lock.
"""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quarry.store import maintain


@task(name="compact-vectors", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[5, 30])
def compact_vectors(store: str, keep_hours: float | None = None, generations_kept: int | None = None) -> dict:
    from datetime import timedelta

    out = maintain.compact(
        Path(store), timedelta(hours=keep_hours) if keep_hours is not None else None, generations_kept
    )
    get_run_logger().info(
        "compacted %d fragments into %d; %d versions kept of %d",
        out["fragments_before"],
        out["fragments_after"],
        out["versions_after"],
        out["versions_before"],
    )
    return out


@task(name="rebuild-indices", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=[30])
def rebuild_indices(store: str, threshold: float | None = None) -> list[dict]:
    out = maintain.reindex(Path(store), threshold)
    get_run_logger().info("%d LanceDB indices, %d rebuilt", len(out), sum(i["rebuilt"] for i in out))
    return out


@task(name="merge-layers", cache_policy=NO_CACHE)
def merge_layers(store: str) -> dict:
    out = maintain.merge(Path(store))
    get_run_logger().info(
        "catalog layers and index segments: %d -> %d (generation %d)",
        out["layers_before"],
        1 if out["merged"] else out["layers_before"],
        out["generation"],
    )
    return out


@task(name="remove-old-generations", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[5, 30])
def remove_old_generations(store: str, keep: int | None = None) -> list[str]:
    out = maintain.remove_generations(Path(store), keep)
    get_run_logger().info("removed %d old generation files", len(out))
    return out


@task(name="build-full-text", cache_policy=NO_CACHE)
def build_full_text(store: str, generation: int, on: bool | None = None) -> dict:
    out = maintain.full_text(Path(store), generation, on)
    get_run_logger().info(
        "DuckDB's full-text tables of generation %d: %s%s",
        generation,
        out["state"],
        " (built)" if out.get("built") else "",
    )
    return out


@task(name="check-store", cache_policy=NO_CACHE)
def check_store(store: str) -> dict:
    out = maintain.check(Path(store))
    get_run_logger().info(
        "consistency check: %s (%d findings)", "healthy" if out["healthy"] else "PROBLEMS", len(out["findings"])
    )
    return out
