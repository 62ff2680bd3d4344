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

import gc
import importlib
import warnings

warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)

from quarry.flows.orchestration import WARM_MODULES as MODULES  # noqa: E402 - after the warning filter

for _name in MODULES:
    try:
        importlib.import_module(_name)
    except ImportError:  # an optional runtime that is not installed: the run imports what it needs
        pass

# What the imports made lives as long as the process: frozen out of the garbage collector, so a
# run's full collections never walk it and a fork's pages of it stay shared (Python's advice for a
# process that forks without exec). Discovery of 50,000 files in a process that imported these
# took 2.0 s, 1.3-1.5 s frozen.
gc.freeze()
