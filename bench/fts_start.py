"""What a commit pays for DuckDB's full-text tables: starting their detached builder (``fts.start``:
a flock and a ``Popen``), from a process holding little memory and from one holding as much as
a full 100K-chunk run (fork costs grow with the parent's page tables). Prints the medians; the
builders it starts find no store and exit at once.

    python bench/fts_start.py [--rounds 15] [--resident-mb 1400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from quarry.store import fts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--resident-mb", type=int, default=1400)
    args = ap.parse_args()
    store = Path(tempfile.mkdtemp(prefix="quarry-fts-start-"))
    for resident in (0, args.resident_mb):
        ballast = np.ones(resident * 2**20 // 8) if resident else None  # written, so resident
        times = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            child = fts.start(store, 1)
            times.append(time.perf_counter() - t)
            if child is not None:
                child.wait()
        print(f"resident +{resident} MB: fts.start median {statistics.median(times) * 1000:.1f} ms, "
              f"max {max(times) * 1000:.1f} ms ({args.rounds} rounds)")
        del ballast


if __name__ == "__main__":
    main()
