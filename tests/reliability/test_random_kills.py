"""kill -9 at random moments of real runs (not only the six fault points of tests/test_crash.py):
after each kill, one more run must leave the store equal to a clean run's."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE
from storage import contents

KILLS = int(os.environ.get("QUARRY_RELIABILITY_KILLS", "20"))


def state(tree: Path, which: int) -> None:
    """Put ``tree`` in state 0 or 1: two trees that differ by edits, adds, deletes and moves, so
    that every run between them has real work to be killed in the middle of."""
    for i in range(24):
        a, b = tree / f"s0-{i}.md", tree / f"s1-{i}.md"
        text = f"# Page {i}\n\n" + f"Deploy rollback review, state {which}, item {i}. " * (30 + 5 * i)
        (a if which == 0 else b).write_text(text)
        (b if which == 0 else a).unlink(missing_ok=True)
    shared = tree / "shared.md"
    shared.write_text(f"# Shared\n\nThe shared page in state {which}.\n")
    moved_from, moved_to = (tree / "m-a.md", tree / "m-b.md") if which else (tree / "m-b.md", tree / "m-a.md")
    if moved_from.exists():
        moved_from.rename(moved_to)
    elif not moved_to.exists():
        moved_to.write_text("# Moved\n\nA page that moves between states.\n")


def kill_run(tree: Path, db: Path, delay: float) -> int | None:
    """Start `quarry index`, SIGKILL it after ``delay`` s; its exit status (None if it finished)."""
    # the two states differ by most of the tree: that churn is intended, so deletes are allowed
    proc = subprocess.Popen(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db), "--allow-deletes"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    if proc.poll() is not None:
        return None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc.returncode


@pytest.mark.slow
def test_random_kills_then_rerun_equal_a_clean_run(tmp_path, run_flow):
    rng = random.Random(int(os.environ.get("QUARRY_RELIABILITY_SEED", "13")))
    clean = {}
    for which in (0, 1):
        tree = tmp_path / f"clean{which}" / "tree"
        shutil.copytree(SAMPLE, tree)
        state(tree, which)
        run_flow([tree], tmp_path / f"clean{which}" / "db")
        clean[which] = contents(tmp_path / f"clean{which}" / "db")
    tree, db = tmp_path / "tree", tmp_path / "db"
    shutil.copytree(SAMPLE, tree)
    state(tree, 0)
    run_flow([tree], db)
    killed = 0
    for n in range(KILLS):
        which = (n + 1) % 2
        state(tree, which)
        if kill_run(tree, db, rng.uniform(0.3, 9.0)) is not None:
            killed += 1
        run_flow([tree], db, overrides={"allow_deletes": True})
        assert contents(db) == clean[which], f"kill {n}: store differs from a clean run"
    assert killed >= KILLS // 2  # most kills landed mid-run, not after it had finished
