"""bench/vs_llamaindex.py: the tree changes it makes, and the quarry side end to end.

The quarry runner runs with the ``hash`` embedder on a three-file tree against the session's
Prefect server; the LlamaIndex side needs its own venv and is left to the bench itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, bench_module

vs = bench_module("vs_llamaindex")

PROSE = (
    "Deploys roll forward by default. When a release breaks production, the on-call engineer "
    "reverts the release commit, waits for the pipeline to finish and checks the dashboards "
    "before telling the channel that the rollback is done."
)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "src"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "deploys.md").write_text(f"# Deploys\n\n{PROSE}\n\n## Rollback\n\n{PROSE}\n", "utf-8")
    (root / "guides" / "oncall.md").write_text(f"# On-call\n\n{PROSE} {PROSE}\n\n- a list item\n", "utf-8")
    (root / "notes.txt").write_text("Short notes about the handbook.\n", "utf-8")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    return root


def test_pick_files_by_extension_and_spread(tree):
    assert [str(p) for p in vs.pick_files(tree, (".md", ".txt"), None)] == [
        "guides/deploys.md",
        "guides/oncall.md",
        "notes.txt",
    ]
    assert len(vs.pick_files(tree, (), None)) == 4
    assert [str(p) for p in vs.pick_files(tree, (".md", ".txt"), 2)] == ["guides/deploys.md", "guides/oncall.md"]


def test_touch_and_edit_change_what_they_say(tree, tmp_path):
    copy = tmp_path / "copy"
    files = vs.pick_files(tree, (".md", ".txt"), None)
    vs.copy_tree(tree, files, copy, base=1_000_000_000.0)
    before = {p: (p.read_bytes(), p.stat().st_mtime) for p in copy.rglob("*") if p.is_file()}
    assert {m for _, m in before.values()} == {1_000_000_000.0}

    assert vs.touch_all(copy) == 3
    for p, (data, mtime) in before.items():
        assert p.read_bytes() == data and p.stat().st_mtime == mtime + vs.DAY

    edited = vs.edit_paragraph(copy)
    old = before[edited][0].decode().split("\n\n")
    new = edited.read_text("utf-8").split("\n\n")
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    assert len(old) == len(new) and len(changed) == 1
    assert new[changed[0]] == old[changed[0]].rstrip() + vs.EDIT_SENTENCE


def test_quarry_side_rows(tree, tmp_path, prefect_api):
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "vs_llamaindex.py"),
            "--tree",
            str(tree),
            "--systems",
            "quarry",
            "--backends",
            "hash",
            "--json",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result
    rows = result["results"]
    assert [(r["system"], r["backend"], r["run"]) for r in rows] == [("quarry", "hash", run) for run in vs.RUNS]
    for r in rows:
        assert isinstance(r["wall_s"], float) and r["wall_s"] > 0
        assert all(isinstance(r[k], int) for k in ("chunks", "embedded", "truncated"))
    full, no_change, touch, edit = rows
    assert full["chunks"] == full["embedded"] == full["stored"] > 0 and full["truncated"] == 0
    assert full["truncated_check"] == 0 and full["chunks_per_s"] > 0
    assert (no_change["chunks"], no_change["embedded"]) == (0, 0)
    assert (touch["chunks"], touch["embedded"]) == (0, 0)  # same bytes, later mtime: nothing to do
    assert edit["embedded"] == 1 and edit["stored"] == full["stored"]
    setup = result["setup"][0]
    assert setup["startup_s"] > 0 and setup["edited"].endswith(".md")
    assert "quarry" in proc.stderr and "edit" in proc.stderr  # the table
