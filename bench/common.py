"""What the bench scripts share: where things are, progress on stderr, the machine a figure was
measured on, and the JSON they write.

The scripts run as ``python bench/<name>.py``: Python puts ``bench/`` first on ``sys.path``, so
they import this module (and each other) by name, and quarry itself is installed (``make setup``).
Only the scripts that reuse the tests' fixtures (fake servers, sample trees) call
:func:`with_test_helpers`.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "RESULTS", "SHARED", "cpu_flags", "load_avg", "log", "machine", "with_test_helpers", "write_json"]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARED = ROOT.parent / "shared" / "data"  # the team's real data, read in place (never copied)

# the flags that change what a figure means here: int8 matrix products, wide vectors
_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "amx_tile")


def log(*parts: object) -> None:
    """Progress, on stderr (stdout is for ``--json``)."""
    print(*parts, file=sys.stderr, flush=True)


def load_avg() -> str:
    """The 1, 5 and 15 minute load averages, as a line says them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_flags() -> list[str]:
    """Of the CPU flags that matter to the embedder and the vector search, those this CPU has."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    have = set(line.partition(":")[2].split())
    return [flag for flag in _FLAGS if flag in have]


def machine() -> dict[str, Any]:
    """Where a figure was measured: CPU count and model, the flags above, load, Python."""
    model = ""
    try:
        model = next(
            (
                line.partition(":")[2].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "cpu_flags": cpu_flags(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_json(path: Path, data: Any) -> Path:
    """``data`` as indented JSON at ``path`` (its folder made), values JSON lacks as strings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def with_test_helpers() -> None:
    """Make the tests' helpers importable (``fakeopenai``, ``llamaserver``, ``tests.samples``):
    the benches that measure against a fake server or a sample tree reuse them."""
    for folder in (ROOT, ROOT / "tests"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
