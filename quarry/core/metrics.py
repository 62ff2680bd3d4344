"""Prometheus metrics of index runs: one registry of run facts, whoever exposes it.

:func:`run_registry` turns a source of facts (the last run's row, as ``quarry runs --json`` prints
it, and the committed generation's time) into a ``prometheus_client`` registry whose values are
read at every collection, so a scrape of ``quarry serve`` sees the age of the last commit grow.
:func:`write_textfile` writes the same registry for node_exporter's textfile collector
(``$QUARRY_METRICS_FILE``, written by every run, atomically). docs/operations.md lists each metric.

Names follow Prometheus' conventions: base units (seconds, bytes), ``_total`` for counters,
``_timestamp_seconds`` for Unix times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

__all__ = ["RUN_COUNTS", "RUN_STATUSES", "RunFacts", "run_registry", "write_textfile", "timestamp"]

# the run row's counters each run metric reports, by the label value it carries
RUN_COUNTS = {
    "added": "added",
    "updated": "updated",
    "deleted": "deleted",
    "failed": "failed",
    "unsupported": "unsupported",
    "moved": "moved",
    "skipped": "unchanged",
}
RUN_STATUSES = ("completed", "partial", "failed", "refused", "skipped", "rollback")
SUCCESS = ("completed", "partial", "rollback")  # statuses that committed a generation


class RunFacts:
    """What the run metrics are made of: ``last_run`` (a run row or None), ``committed_at`` (the
    Unix time of the committed generation, or None), ``generation``, ``schedule_seconds`` (the
    schedule's interval, when a schedule runs the store) and ``bytes_written`` (by the last run)."""

    def __init__(
        self,
        last_run: dict[str, Any] | None = None,
        committed_at: float | None = None,
        generation: int | None = None,
        schedule_seconds: float | None = None,
        bytes_written: int | None = None,
    ):
        self.last_run = last_run
        self.committed_at = committed_at
        self.generation = generation
        self.schedule_seconds = schedule_seconds
        self.bytes_written = bytes_written


def timestamp(value: object) -> float | None:
    """A run row's time (ISO text, naive UTC, or a datetime) as Unix seconds."""
    if value in (None, ""):
        return None
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(str(value).rstrip("Z"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return float(value.timestamp())


class _RunCollector:
    def __init__(self, facts: Callable[[], RunFacts]):
        self.facts = facts

    def describe(self) -> list[Metric]:
        return []  # values are read at collection; registering must not call the source

    def collect(self) -> Iterator[Metric]:
        facts = self.facts()
        now = time.time()
        run = facts.last_run or {}
        status = GaugeMetricFamily(
            "quarry_run_last_status", "1 for the status of the last index run, 0 for the others", labels=["status"]
        )
        for name in RUN_STATUSES:
            status.add_metric([name], 1.0 if run.get("status") == name else 0.0)
        yield status
        started, finished = timestamp(run.get("started")), timestamp(run.get("finished"))
        yield _gauge("quarry_run_last_start_timestamp_seconds", "When the last index run started (Unix time)", started)
        durations = run.get("durations") or {}
        total = (
            (durations.get("total") or {}).get("seconds")
            if isinstance(durations.get("total"), dict)
            else durations.get("total")
        )
        if total is None and started is not None and finished is not None:
            total = finished - started
        yield _gauge("quarry_run_last_duration_seconds", "Wall time of the last index run", total)
        stages = GaugeMetricFamily(
            "quarry_run_last_stage_seconds", "Wall time of each stage of the last index run", labels=["stage"]
        )
        for stage, d in durations.items():
            if stage != "total" and isinstance(d, dict) and d.get("seconds") is not None:
                stages.add_metric([stage], float(d["seconds"]))
        yield stages
        docs = GaugeMetricFamily(
            "quarry_run_last_documents", "Documents of the last index run, by what happened to them", labels=["outcome"]
        )
        for field, outcome in RUN_COUNTS.items():
            docs.add_metric([outcome], float(run.get(field) or 0))
        yield docs
        yield _gauge(
            "quarry_run_last_chunks_embedded",
            "Chunks the last index run sent to the model",
            run.get("embedded_chunks") if run else None,
        )
        yield _gauge(
            "quarry_run_last_written_bytes", "Bytes the last index run added to the store", facts.bytes_written
        )
        yield _gauge("quarry_index_generation", "The committed generation", facts.generation)
        yield _gauge(
            "quarry_index_last_commit_timestamp_seconds",
            "When the committed generation was committed (Unix time)",
            facts.committed_at,
        )
        age = None if facts.committed_at is None else max(0.0, now - facts.committed_at)
        yield _gauge(
            "quarry_index_seconds_since_commit",
            "Seconds since the last successful commit (as of this scrape, or of the write of a textfile)",
            age,
        )
        if facts.schedule_seconds:
            yield _gauge(
                "quarry_schedule_interval_seconds",
                "The interval of the schedule that re-indexes the store",
                facts.schedule_seconds,
            )
            stale = 1.0 if age is None else float(age > 3 * facts.schedule_seconds)  # never committed: stale
            yield _gauge("quarry_index_stale", "1 when no commit succeeded for 3 schedule intervals", stale)


def _gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    if value is not None:
        family.add_metric([], float(value))
    return family


def run_registry(facts: Callable[[], RunFacts], registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """A registry (a new one unless given) exposing the run facts ``facts()`` returns at each collection."""
    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    registry.register(_RunCollector(facts))
    return registry


def write_textfile(path: str, facts: RunFacts) -> None:
    """Write the run metrics to ``path`` for node_exporter's textfile collector (atomically: a
    temporary file renamed into place, as the collector requires)."""
    write_to_textfile(path, run_registry(lambda: facts))
