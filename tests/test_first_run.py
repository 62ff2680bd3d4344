"""What a `quarry index` spends besides its run: the collector kept out of imports and exit
(bench/first_run.py measures the time; no test here times anything)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from conftest import ROOT


def test_importing_the_flow_pauses_the_collector_and_leaves_it_as_it_was():
    from quarry.flows.run import _import_the_flow

    was = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            _import_the_flow()
            assert gc.isenabled() is state
    finally:
        (gc.enable if was else gc.disable)()
    assert "fastapi.encoders" in sys.modules  # what Prefect imports at a flow's start otherwise


def test_the_cli_freezes_its_objects_before_the_interpreter_exits():
    """Frozen objects are skipped by the interpreter's last full collection; a command that fails
    exits the same way."""
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "from quarry.cli.main import main\n"
        "sys.argv = ['quarry'] + sys.argv[1:]\n"
        "main()\n"
    )
    for args, code_expected in ((["--help"], 0), (["status", "--db", "/nonexistent/store"], None)):
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, env=os.environ, cwd=ROOT, timeout=120
        )
        assert done.stdout.strip().endswith("frozen True"), (done.stdout[-500:], done.stderr[-500:])
        if code_expected is not None:
            assert done.returncode == code_expected
