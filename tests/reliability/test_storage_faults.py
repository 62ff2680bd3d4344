"""Storage faults with real processes on real filesystems: a store that turns read-only mid-run,
a disk that fills, odd store paths, hand-damaged files (and `quarry doctor`), readers during
commits and a second writer. Each ends in a clear error and an intact previous index."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE
from storage import can_chattr, can_mount, contents, immutable, resize, tmpfs


def _edit(tree: Path, n: int = 30) -> None:
    for i in range(n):
        (tree / f"extra-{i}.md").write_text(f"# Extra {i}\n\n" + f"Deploy rollback review notes, item {i}. " * 40)


def _clean_error(done) -> None:
    """Exit 1, one ``error:`` line, no traceback (Prefect may log its own shutdown after it)."""
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr + done.stdout
    assert sum(line.startswith("error: ") for line in done.stderr.splitlines()) == 1, done.stderr[-2000:]


def _paused_run(tree, db, point, release, env=None):
    env = {**os.environ, **(env or {}), "QUARRY_FAULT": f"pause:{point}", "QUARRY_FAULT_FILE": str(release)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not Path(str(release) + ".paused").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after-vectors", "before-commit"])
def test_store_turns_read_only_mid_run(tmp_path, cli, point):
    """EROFS needs a remount, which the kernel refuses while the run holds files open for writing;
    the immutable attribute (``chattr +i``, binding even on root) makes every write in the store
    fail the same way at the moment the run is paused."""
    if not can_chattr(tmp_path):
        pytest.skip("chattr +i is not available on this filesystem")
    tree, db = tmp_path / "tree", tmp_path / "db"
    shutil.copytree(SAMPLE, tree)
    assert cli("index", tree, "--db", db).returncode == 0
    before = contents(db)
    _edit(tree)
    release = tmp_path / "release"
    proc = _paused_run(tree, db, point, release)
    immutable(db, True)
    try:
        release.touch()
        out, err = proc.communicate(timeout=300)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        _clean_error(done)
        assert contents(db) == before  # readers still see the last commit, on the read-only store
    finally:
        immutable(db, False)
    assert contents(db) == before
    again = cli("index", tree, "--db", db, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["added"] == 30


@pytest.mark.slow
def test_disk_fills_mid_run(tmp_path, cli):
    """A tmpfs shrunk to just above what the store uses, then a run that needs more; where
    mounting is not allowed, a file-size limit (``prlimit --fsize``) makes writes fail instead."""
    tree = tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    if can_mount():
        with tmpfs(tmp_path / "mnt") as mnt:
            db = mnt / "db"
            assert cli("index", tree, "--db", db).returncode == 0
            before = contents(db)
            used = sum(p.stat().st_size for p in db.rglob("*") if p.is_file())
            resize(mnt, f"{used // 1024 + 256}k")
            for i in range(40):
                (tree / f"big-{i}.md").write_text(f"# Big {i}\n\n" + f"Filler text {i} about deploys. " * 2000)
            done = cli("index", tree, "--db", db)
            _clean_error(done)
            assert "No space left on device" in done.stderr or "space" in done.stderr.lower(), done.stderr
            assert contents(db) == before
            resize(mnt, "256m")
            again = cli("index", tree, "--db", db, "--json")
            assert again.returncode == 0, again.stderr
            assert json.loads(again.stdout)["added"] == 40
        print("disk full: tmpfs")
        return
    if not shutil.which("prlimit"):
        pytest.skip("neither mount nor prlimit available")
    db = tmp_path / "db"
    assert cli("index", tree, "--db", db).returncode == 0
    before = contents(db)
    for i in range(40):
        (tree / f"big-{i}.md").write_text(f"# Big {i}\n\n" + f"Filler text {i} about deploys. " * 2000)
    done = subprocess.run(
        ["prlimit", "--fsize=200000", sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    _clean_error(done)
    assert contents(db) == before
    print("disk full: prlimit --fsize")


def test_store_path_with_spaces_and_non_ascii(tmp_path, cli):
    tree = tmp_path / "my docs — ü"
    shutil.copytree(SAMPLE, tree)
    db = tmp_path / "store with spaces — é ü 東京" / "db"
    assert cli("index", tree, "--db", db).returncode == 0
    found = cli("search", "deploy rollback", "--db", db, "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["results"]
    again = cli("index", tree, "--db", db, "--json")
    assert json.loads(again.stdout)["embedded_chunks"] == 0
    assert cli("doctor", "--db", db).returncode == 0


def test_damaged_current_catalog_and_index_files(tmp_path, cli):
    import quarry

    tree, db = tmp_path / "tree", tmp_path / "db"
    shutil.copytree(SAMPLE, tree)
    quarry.index(tree, db)  # the two runs the damage is done to: in-process (the setting, not the case)
    _edit(tree, 3)
    quarry.index(tree, db)
    before = contents(db)
    pointer = json.loads((db / "CURRENT").read_text())

    # CURRENT truncated by hand: reads and writes stop with one line naming it; doctor repairs it.
    (db / "CURRENT").write_text('{"generation": 2, "cata')
    for args in (("search", "deploy", "--db", db), ("status", "--db", db), ("index", tree, "--db", db)):
        done = cli(*args)
        _clean_error(done)
        assert str(db / "CURRENT") in done.stderr and "quarry doctor" in done.stderr
    check = cli("doctor", "--db", db)
    assert check.returncode == 1 and "PROBLEM" in check.stdout and "pointer" in check.stdout
    fixed = cli("doctor", "--db", db, "--repair")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert contents(db) == before and json.loads((db / "CURRENT").read_text())["catalog"] == pointer["catalog"]

    # CURRENT deleted: the same repair.
    (db / "CURRENT").unlink()
    assert cli("doctor", "--db", db, "--repair").returncode == 0
    assert contents(db) == before

    # The search index files deleted: rebuilt from catalog and vectors.
    shutil.rmtree(db / f"index-{pointer['generation']:06d}")
    assert cli("doctor", "--db", db).returncode == 1
    assert cli("doctor", "--db", db, "--repair").returncode == 0
    assert contents(db) == before

    # The catalog deleted: not repairable; every command says which file and how to recover.
    (db / pointer["catalog"]).rename(tmp_path / "saved.duckdb")
    done = cli("search", "deploy", "--db", db)
    _clean_error(done)
    assert pointer["catalog"] in done.stderr
    check = cli("doctor", "--db", db, "--repair")
    assert check.returncode == 1 and "--full" in check.stdout
    (tmp_path / "saved.duckdb").rename(db / pointer["catalog"])
    assert cli("doctor", "--db", db).returncode == 0

    # The catalog overwritten with garbage: named, not repaired, previous files untouched.
    saved = (db / pointer["catalog"]).read_bytes()
    (db / pointer["catalog"]).write_bytes(b"\0garbage" * 1000)
    done = cli("index", tree, "--db", db)
    _clean_error(done)
    assert pointer["catalog"] in done.stderr
    (db / pointer["catalog"]).write_bytes(saved)
    assert contents(db) == before


READER = r"""
import json, os, sys
import quarry
db, out, stop = sys.argv[1], sys.argv[2], sys.argv[3]
seen, errors, reads = set(), [], 0

def prefix(names):  # generation n holds exactly g00.md .. g(n-1).md
    return {f"g{i:02d}.md" for i in range(len(names))} == names

with quarry.open(db) as idx:  # one long-lived handle: it follows commits as they happen
    while not os.path.exists(stop):
        try:
            before = idx.snapshot.pointer.generation
            n = idx.status()["documents"]
            bm25 = {r.path.rsplit("/", 1)[-1] for r in idx.search("generationmarker", k=100, mode="bm25").results}
            vec = {r.path.rsplit("/", 1)[-1] for r in idx.search("generationmarker", k=100, mode="vector").results}
            hybrid = {r.path.rsplit("/", 1)[-1] for r in idx.search("generationmarker", k=100).results}
            after = idx.snapshot.pointer.generation
            # Every answer is one whole generation; when no commit happened meanwhile, the same one.
            if not (prefix(bm25) and prefix(vec) and prefix(hybrid)):
                errors.append(f"torn answer: bm25 {sorted(bm25)}, vector {sorted(vec)}, hybrid {sorted(hybrid)}")
            elif before == after and not (len(bm25) == len(vec) == len(hybrid) == n):
                errors.append(f"generation {before}: {n} documents, {len(bm25)}/{len(vec)}/{len(hybrid)} hits")
            seen.add(len(bm25))
            reads += 1
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
json.dump({"seen": sorted(seen), "errors": errors[:20], "reads": reads}, open(out, "w"))
"""


@pytest.mark.slow
def test_readers_during_ten_commits_see_whole_generations(tmp_path, run_flow, cli):
    tree, db = tmp_path / "tree", tmp_path / "db"
    tree.mkdir()
    (tree / "g00.md").write_text("# G0\n\nThe generationmarker of generation 0.\n")
    run_flow([tree], db)
    script = tmp_path / "reader.py"
    script.write_text(READER)
    stop = tmp_path / "stop"
    readers = [
        subprocess.Popen(
            [sys.executable, str(script), str(db), str(tmp_path / f"r{i}.json"), str(stop)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        for i in range(2)
    ]
    try:
        for i in range(1, 11):
            (tree / f"g{i:02d}.md").write_text(f"# G{i}\n\nThe generationmarker of generation {i}.\n")
            report = run_flow([tree], db)
            assert report["added"] == 1
        # A second writer while this process holds the store: refused at once, naming the holder.
        from quarry.store.layout import WriterLock

        with WriterLock(db):
            done = cli("index", tree, "--db", db)
        _clean_error(done)
        assert f"pid {os.getpid()}" in done.stderr
    finally:
        stop.touch()
        for r in readers:
            r.wait(timeout=120)
    for i in range(2):
        result = json.loads((tmp_path / f"r{i}.json").read_text())
        assert result["errors"] == [] and result["reads"] > 0
        assert set(result["seen"]) <= set(range(1, 12))
