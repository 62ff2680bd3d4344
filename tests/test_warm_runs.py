"""``quarry serve`` forks each scheduled run from a process that imported the flow once."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys

from prefect import flow


@flow(name="report-process")
def report_process(out: str) -> None:
    """What a run's process had imported before its flow began, and whose child it is."""
    with open(out, "w") as fh:
        json.dump(
            {
                "lancedb": "lancedb" in sys.modules,
                "flow": "quarry.flows.index" in sys.modules,
                "frozen": gc.get_freeze_count(),
                "ppid": os.getppid(),
                "pid": os.getpid(),
            },
            fh,
        )


def test_served_flow_runs_fork_from_a_warm_process(prefect_api, tmp_path):
    import prefect.flow_engine as engine
    from quarry.flows.orchestration import warm_flow_runs

    saved = engine.multiprocessing
    runs = []
    with warm_flow_runs():
        for i in range(2):
            out = tmp_path / f"run{i}.json"
            proc = engine.run_flow_in_subprocess(report_process, parameters={"out": str(out)})
            proc.join(180)
            assert proc.exitcode == 0
            runs.append(json.loads(out.read_text()))
    assert engine.multiprocessing is saved  # Prefect's own spawn again outside the context
    for run in runs:
        assert run["lancedb"] and run["flow"], run  # imported before the run began, not by it
        assert run["frozen"] > 100_000, run  # what the imports made is out of the run's collections
        assert run["ppid"] != os.getpid()  # forked by the warm process, not started by this one
    assert runs[0]["pid"] != runs[1]["pid"] and runs[0]["ppid"] == runs[1]["ppid"]  # one process per run


def test_every_module_the_warm_process_imports_exists():
    from quarry.flows.orchestration import WARM_MODULES

    assert [m for m in WARM_MODULES if importlib.util.find_spec(m) is None] == []
