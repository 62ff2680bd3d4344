"""Every script in bench/ starts and lists its options (`--help`): a bench that no longer imports
(a moved module, a renamed function it reaches into) fails here, in the default suite, rather than
when someone next measures with it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

# the scripts (a module other benches import, such as consensus.py, has no `__main__`)
BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*.py") if '__name__ == "__main__"' in p.read_text())


def test_the_benches_are_found():
    assert len(BENCHES) >= 25 and "scale.py" in BENCHES


@pytest.mark.parametrize("name", BENCHES)
def test_a_bench_lists_its_options(name):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout, done.stdout[-500:]
