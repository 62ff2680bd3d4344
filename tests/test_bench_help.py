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


def test_every_bench_has_one_concern():
    """bench/common.py's CONCERNS lists every script once, and nothing that is not one."""
    from conftest import bench_module

    listed = [f"{name}.py" for names in bench_module("common").CONCERNS.values() for name in names]
    assert sorted(listed) == [b for b in BENCHES if b != "__main__.py"]


def test_python_bench_lists_the_benches_by_concern():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench"), "scale"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["concern", "script"]
    assert {line.split()[1] for line in lines[1:]} == {
        "bench/catalog_layers.py",
        "bench/scale.py",
        "bench/scale_memory.py",
        "bench/segment_queries.py",
    }
    assert all(line.startswith("scale ") and len(line.split()) > 3 for line in lines[1:])


def test_the_shared_table_aligns_numbers_right_and_text_left():
    from conftest import bench_module

    text = bench_module("common").table(["mode", "nDCG@10"], [["bm25", 0.705], ["hybrid", None], ["vector", 12.5]])
    assert text.splitlines() == ["mode    nDCG@10", "bm25      0.705", "hybrid        -", "vector     12.5"]
    formatted = bench_module("common").table(["set", "R@10"], [["scifact", "0.8244"], ["cranfield", "1,000"]])
    assert formatted.splitlines() == ["set          R@10", "scifact    0.8244", "cranfield   1,000"]
