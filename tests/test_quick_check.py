"""Re-runs do not read files whose size and mtime the catalog already holds (rsync's quick check),
but never miss a change: a new mtime, a new size, a write within the clock tick of the hash, --full."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from conftest import SAMPLE

import quarry.ingest.discover as discover_mod
from quarry.core import plans
from quarry.ingest.plan import discover_roots, known_files
from quarry.store.reader import committed_catalog

HOUR_AGO = time.time() - 3600


@pytest.fixture
def tree(tmp_path):
    dest = tmp_path / "tree"
    shutil.copytree(SAMPLE, dest)
    for path in dest.rglob("*"):
        if path.is_file():
            os.utime(path, (HOUR_AGO, HOUR_AGO))  # written long before any run
    return dest


@pytest.fixture
def no_margin(monkeypatch):
    """The racy margin at 0 s: the tree is copied (ctime: now) a moment before the first run, and
    the tests below are about sizes, mtimes and ctimes, not about that margin."""
    monkeypatch.setattr(plans, "RACY_SECONDS", 0.0)


@pytest.fixture
def reads(monkeypatch):
    """The paths discovery hashes (reads whole), in order."""
    seen: list[str] = []
    real = discover_mod.sha256_file

    def counting(path):
        seen.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(discover_mod, "sha256_file", counting)
    return seen


def same_size_edit(path, keep_mtime: float | None = None):
    """Change one byte of ``path`` (its size stays); restore ``keep_mtime`` when given."""
    data = bytearray(path.read_bytes())
    data[-2] = ord("Q") if data[-2] != ord("Q") else ord("R")
    path.write_bytes(bytes(data))
    if keep_mtime is not None:
        os.utime(path, (keep_mtime, keep_mtime))


def test_an_unchanged_tree_is_walked_not_read(tree, tmp_path, run_flow, reads, no_margin):
    db = tmp_path / "db"
    first = run_flow([tree], db)
    assert first["added"] == 5 and len(reads) == 5
    reads.clear()
    known = known_files(committed_catalog(db)[0])
    assert len(known) == 5
    again = discover_roots([str(tree)], catalog=committed_catalog(db))
    assert reads == [] and len(again.files) == 5
    assert sorted(f.sha256 for f in again.files) == sorted(v[2] for v in known.values())
    second = run_flow([tree], db)
    assert reads == [] and second["skipped"] == 5 and second["added"] == second["updated"] == 0


def test_a_changed_file_is_read_and_reindexed(tree, tmp_path, run_flow, reads, no_margin):
    db = tmp_path / "db"
    run_flow([tree], db)
    deploys = tree / "runbooks" / "deploys.md"
    same_size_edit(deploys)  # same size, new mtime
    (tree / "handbook" / "expenses.txt").write_text("Expenses are filed in Quokka within 30 days.\n")
    os.utime(tree / "handbook" / "expenses.txt", (HOUR_AGO, HOUR_AGO))  # new size, old mtime
    reads.clear()
    report = run_flow([tree], db)
    assert sorted(reads) == ["deploys.md", "expenses.txt"]
    assert report["updated"] == 2 and report["skipped"] == 3


def test_a_copy_that_keeps_size_and_mtime_is_read(tree, tmp_path, run_flow, reads, no_margin):
    """Bytes put in place with the old size and mtime (``cp -p`` of a same-size file, a rename over
    it, an unpacked archive): the mtime cannot tell, the ctime the system sets can."""
    db = tmp_path / "db"
    run_flow([tree], db)
    deploys = tree / "runbooks" / "deploys.md"
    other = tmp_path / "deploys-other.md"
    data = bytearray(deploys.read_bytes())
    data[-2] = ord("Q") if data[-2] != ord("Q") else ord("R")
    other.write_bytes(bytes(data))
    os.utime(other, (HOUR_AGO, HOUR_AGO))
    shutil.copy2(other, deploys)  # same size, same mtime, other bytes
    assert deploys.stat().st_mtime == HOUR_AGO and deploys.stat().st_size == len(data)
    reads.clear()
    report = run_flow([tree], db)
    assert "deploys.md" in reads and report["updated"] == 1


def test_a_file_read_once_is_vouched_for_from_the_next_run(tree, tmp_path, run_flow, reads, no_margin):
    """A file the quick check had to read (its ctime was newer than the run that hashed it: a chmod,
    a copy) is recorded under the run that read it, so later runs need not read it again."""
    db = tmp_path / "db"
    run_flow([tree], db)
    deploys = tree / "runbooks" / "deploys.md"
    os.chmod(deploys, 0o640)  # ctime moves, bytes do not
    (tree / "handbook" / "expenses.txt").write_text("Expenses are filed in Quokka within 30 days.\n")
    reads.clear()
    assert run_flow([tree], db)["updated"] == 1  # a commit, which records deploys.md under this run
    assert "deploys.md" in reads
    time.sleep(0.05)
    reads.clear()
    run_flow([tree], db)
    assert "deploys.md" not in reads


def test_a_write_in_the_tick_of_the_hash_is_never_trusted(tree, tmp_path, run_flow, reads):
    """A file written just before a run, then changed again with its size and mtime kept (a coarse
    clock, or a tool that restores times), is read on every run: its mtime is too close to the
    run that hashed it to stand for its bytes."""
    db = tmp_path / "db"
    deploys = tree / "runbooks" / "deploys.md"
    now = time.time()
    os.utime(deploys, (now, now))
    run_flow([tree], db)
    known = known_files(committed_catalog(db)[0])
    assert str(deploys) not in known and len(known) == 4
    same_size_edit(deploys, keep_mtime=now)
    reads.clear()
    report = run_flow([tree], db)
    assert "deploys.md" in reads and report["updated"] == 1


def test_full_and_rehash_read_every_file(tree, tmp_path, run_flow, reads, no_margin, monkeypatch):
    db = tmp_path / "db"
    run_flow([tree], db)
    reads.clear()
    run_flow([tree], db, full=True)
    assert len(reads) == 5
    reads.clear()
    monkeypatch.setenv("QUARRY_REHASH", "1")
    run_flow([tree], db)
    assert len(reads) == 5


def test_a_file_back_at_its_first_path_with_its_first_bytes_is_indexed(tree, tmp_path, run_flow):
    """A file edited, then moved, then restored at its first path with its first bytes (a backup,
    a checkout of an old version) while the moved copy goes: the new document's id, derived from
    path and bytes, is the id the moved document still carries. The run must index it, not lose
    it to that document's removal."""
    db = tmp_path / "db"
    deploys = tree / "runbooks" / "deploys.md"
    first_bytes = deploys.read_bytes()
    run_flow([tree], db)
    deploys.write_bytes(first_bytes + b"\nQuokka station runbook addendum.\n")
    run_flow([tree], db)
    moved = tree / "runbooks" / "deploys-old.md"
    deploys.rename(moved)
    assert run_flow([tree], db)["moved"] == 1
    moved.unlink()
    deploys.write_bytes(first_bytes)
    report = run_flow([tree], db)
    assert report["added"] == 1 and report["deleted"] == 1
    import quarry

    with quarry.open(db) as idx:
        paths = {d["path"] for d in idx.documents()} if hasattr(idx, "documents") else None
        hits = idx.search("deployctl rollback", k=3).results
    assert hits and hits[0].path == str(deploys)
    if paths is not None:
        assert str(deploys) in paths and str(moved) not in paths
    assert run_flow([tree], db)["added"] == 0  # and the next run finds nothing new
