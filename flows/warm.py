"""Importing this module warms a process for index runs: ``quarry serve`` forks each scheduled
run from a process that imported it once (:func:`quarry.flows.orchestration.warm_context`).

A new interpreter pays about 4 s of imports before a run does anything (Prefect, LanceDB, the
flow, the local embedder's runtime); a forked one has them already. Only imports happen here: no
store is opened, no model loaded, no run made, so a fork finds nothing half done. The one thread
an import starts is LanceDB's idle event loop, which LanceDB itself restarts in a forked child;
its warning that a fork is experimental is about state that is mid-operation at the fork, which
this process never has, so it is silenced here (and inherited by each fork).
"""

from __future__ import annotations

import importlib
import warnings

warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)

MODULES = ("quarry.flows.index", "quarry.store.writer", "quarry.tasks.load", "quarry.ingest.embedders.local",
           "quarry.ingest.embedders.onnx_backend", "quarry.ingest.facets", "quarry.ingest.llm.context",
           "quarry.sql", "lancedb", "duckdb", "pyarrow", "numpy", "onnxruntime", "tokenizers",
           "prefect.flow_engine", "prefect.client.orchestration", "prefect.task_engine", "fastapi")

for _name in MODULES:
    try:
        importlib.import_module(_name)
    except ImportError:  # an optional runtime that is not installed: the run imports what it needs
        pass
