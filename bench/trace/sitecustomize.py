"""Timestamps for bench/first_run.py, in every Python process it starts (``PYTHONPATH`` names this
folder and ``QUARRY_BENCH_TRACE`` a file; without that variable nothing happens).

Appends one JSON line per event, ``{"event", "t", "pid"}`` with ``time.time()``, from the ``quarry``
process and from its private Prefect server alike, so that the bench can split one run's wall
time. Nothing is imported early: each hook wraps a module when the program itself imports it, so
the import times measured are the program's own. Works on any checkout whose names match
(``quarry.flows.index.index_flow``, Prefect's ``PrefectDBInterface.create_db``, uvicorn's
``Server.startup``).
"""

from __future__ import annotations

import json
import os
import sys
import time

_FILE = os.environ.get("QUARRY_BENCH_TRACE")


def _note(event: str, **extra) -> None:
    with open(_FILE, "a", encoding="utf-8") as out:
        out.write(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **extra}) + "\n")


def _wrap_async(cls, name: str, before: str | None, after: str) -> None:
    original = getattr(cls, name)

    async def wrapper(*args, **kwargs):
        if before:
            _note(before)
        try:
            return await original(*args, **kwargs)
        finally:
            _note(after)

    setattr(cls, name, wrapper)


def _index_flow(module) -> None:
    flow = module.index_flow

    def traced(*args, **kwargs):
        _note("flow_start")
        report = flow(*args, **kwargs)
        commit = (report.get("durations", {}).get("commit") or {}).get("seconds") if isinstance(report, dict) else None
        _note("flow_end", commit_s=commit)
        return report

    module.index_flow = traced


_HOOKS = {
    "quarry.cli.main": lambda m: _note("cli_imported"),
    "quarry.flows.index": _index_flow,
    "prefect.server.database.interface": lambda m: _wrap_async(
        m.PrefectDBInterface, "create_db", "migrate_start", "migrate_end"
    ),
    "uvicorn.server": lambda m: _wrap_async(m.Server, "startup", None, "server_ready"),
}


class _Finder:
    """Runs a hook right after its module is executed, by wrapping the loader's exec_module."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is _Finder:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                execute = spec.loader.exec_module

                def exec_module(module, execute=execute, hook=_HOOKS[name]):
                    execute(module)
                    hook(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


if _FILE:
    _note("process_start")
    sys.meta_path.insert(0, _Finder)
