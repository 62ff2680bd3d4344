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

__all__ = [
    "CONCERNS",
    "ROOT",
    "RESULTS",
    "SHARED",
    "cpu_flags",
    "load_avg",
    "log",
    "machine",
    "table",
    "with_test_helpers",
    "write_json",
]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARED = ROOT.parent / "shared" / "data"  # the team's real data, read in place (never copied)

# The scripts by what they measure (``python bench`` lists them). They stay side by side in bench/:
# ``python bench/<name>.py`` is the command docs/benchmarks.md gives beside every figure, and the
# acceptance checks run some of them by that path.
CONCERNS: dict[str, tuple[str, ...]] = {
    "quality": (
        "ablation",
        "ann_recall",
        "binary_vectors",
        "dedup",
        "eval_beir",
        "eval_read_side",
        "fusion",
        "longpdf",
        "markup",
        "model_variants",
        "quality",
        "relevance",
        "selfeval",
    ),
    "ingest": ("formats", "legacy_office", "ocr", "pdf_layout", "reliability", "sources"),
    "speed": ("embed", "embed_ops", "first_run", "flow_stages", "incremental", "runners", "vs_llamaindex"),
    "scale": ("catalog_layers", "scale", "scale_memory", "segment_queries"),
    "serving": ("answers", "api_load", "query_latency", "remote_reader", "web"),
}

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


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A plain text table: a column per header, each as wide as its widest cell; a column of
    numbers (or of numbers already formatted, such as ``f"{x:.4f}"``; ``-`` for none)
    right-aligned, text left-aligned."""

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    def numeric(value: Any) -> bool:
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            return True
        try:
            float(str(value).replace(",", ""))
        except ValueError:
            return False
        return isinstance(value, str)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells if i < len(r)]) for i, h in enumerate(header)]
    right = [all(numeric(r[i]) for r in rows if i < len(r)) and bool(rows) for i in range(len(header))]
    lines = ["  ".join(h.rjust(w) if r else h.ljust(w) for h, w, r in zip(header, widths, right, strict=True))]
    for row in cells:
        lines.append(
            "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=False)).rstrip()
        )
    return "\n".join(line.rstrip() for line in lines)


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
