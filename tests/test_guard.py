"""The deletion guard: a run never empties an index by accident (quarry/ingest/guard.py).

Pure cases first (the guard's decisions on scans and plans), then real runs through the CLI on a
local store and on an ``s3://`` store: an emptied root, a removed root, a pattern that matches
nothing, a narrowed include, a mass delete refused then allowed, and ``--dry-run``.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from quarry.core.errors import UsageError
from quarry.core.models import FileInfo
from quarry.core.paths import check_patterns
from quarry.core.plans import CatalogDoc
from quarry.ingest.discover import RootScan, discover
from quarry.ingest.guard import GuardLimits, check_deletes, check_roots, pattern_flags
from quarry.ingest.plan import make_plan

ROOT = "/share/docs"


def docs(n: int, root: str = ROOT) -> list[CatalogDoc]:
    return [CatalogDoc(doc_id=f"d{i}", path=f"{root}/f{i:03d}.md", sha256=f"h{i}", mtime=0.0) for i in range(n)]


def files(n: int, root: str = ROOT, start: int = 0) -> list[FileInfo]:
    return [
        FileInfo(
            path=f"{root}/f{i:03d}.md",
            root=root,
            rel_path=f"f{i:03d}.md",
            file_type="md",
            size=10,
            mtime=0.0,
            sha256=f"h{i}",
        )
        for i in range(start, start + n)
    ]


# --- the guard's decisions ---------------------------------------------------------------------


@pytest.mark.parametrize("status", ["empty", "unreadable", "missing"])
def test_a_root_that_cannot_be_seen_keeps_its_documents(status):
    scan = RootScan(ROOT, status, error="cannot list it: permission denied" if status == "unreadable" else "")
    verdict = check_roots([scan], docs(20), GuardLimits())
    assert verdict.scope == [] and not verdict.refused
    assert [f.path for f in verdict.failures] == [ROOT]
    assert "its 20 indexed documents are kept" in verdict.failures[0].error
    plan = make_plan([], docs(20), verdict.scope)
    assert plan.removed == []  # out of scope: nothing to delete


def test_allow_deletes_lets_an_emptied_or_removed_root_go_but_never_an_unreadable_one():
    allow = GuardLimits(allow_deletes=True)
    assert check_roots([RootScan(ROOT, "empty")], docs(3), allow).scope == [ROOT]
    assert check_roots([RootScan(ROOT, "missing")], docs(3), allow).scope == [ROOT]
    verdict = check_roots([RootScan(ROOT, "unreadable", error="cannot list it: I/O error")], docs(3), allow)
    assert verdict.scope == [] and verdict.failures


def test_a_missing_root_never_indexed_is_a_usage_error():
    with pytest.raises(UsageError, match="path not found: /share/typo"):
        check_roots([RootScan("/share/typo", "missing")], docs(3), GuardLimits())


def test_an_empty_root_never_indexed_is_a_failure_that_says_so():
    verdict = check_roots([RootScan(ROOT, "empty")], [], GuardLimits())
    assert verdict.failures[0].error.startswith("no files under it") and "kept" not in verdict.failures[0].error


def test_patterns_that_leave_nothing_refuse_the_run_naming_the_flag():
    verdict = check_roots(
        [RootScan(ROOT, "unmatched", walked=21)], docs(20), GuardLimits(), pattern_flags(("*.zzz",), ())
    )
    assert verdict.refused and verdict.scope == []
    assert verdict.refusals == [
        f"--include '*.zzz' leaves none of the 21 files under {ROOT}: the run would delete its 20 indexed documents"
    ]
    assert verdict.message().startswith("refused: ") and "--allow-deletes" in verdict.message()
    assert check_roots([RootScan(ROOT, "unmatched", walked=21)], docs(20), GuardLimits(allow_deletes=True)).scope == [
        ROOT
    ]


@pytest.mark.parametrize("kept, refused", [(20, False), (11, False), (10, False), (9, True), (0, True)])
def test_more_than_half_of_a_root_deleted_is_refused(kept, refused):
    stored = docs(20)
    verdict = check_roots([RootScan(ROOT, "ok", 20, 20)], stored, GuardLimits())
    plan = make_plan(files(kept), stored, verdict.scope)
    check_deletes(verdict, plan, stored, GuardLimits())
    assert verdict.refused is refused
    if refused:
        assert f"would delete {20 - kept} of the 20 documents indexed under {ROOT}" in verdict.refusals[0]


def test_a_handful_of_deletes_always_passes_and_the_limits_are_settings():
    stored = docs(6)
    verdict = check_roots([RootScan(ROOT, "ok", 1, 1)], stored, GuardLimits())
    plan = make_plan(files(1), stored, verdict.scope)  # 5 of 6 deleted: a handful
    assert not check_deletes(verdict, plan, stored, GuardLimits()).refused
    strict = GuardLimits(max_share=0.1, free=0)
    stored = docs(20)
    verdict = check_roots([RootScan(ROOT, "ok", 17, 17)], stored, strict)  # 3 of 20: over 10%
    assert check_deletes(verdict, make_plan(files(17), stored, verdict.scope), stored, strict).refused


def test_moves_are_not_deletes_and_emptied_files_are():
    stored = docs(20)
    moved = [
        FileInfo(
            path=f"{ROOT}/new/f{i:03d}.md",
            root=ROOT,
            rel_path=f"new/f{i:03d}.md",
            file_type="md",
            size=10,
            mtime=0.0,
            sha256=f"h{i}",
        )
        for i in range(20)
    ]
    verdict = check_roots([RootScan(ROOT, "ok", 20, 20)], stored, GuardLimits())
    plan = make_plan(moved, stored, verdict.scope)
    assert len(plan.moved) == 20 and not check_deletes(verdict, plan, stored, GuardLimits()).refused
    emptied = [
        FileInfo(path=f.path, root=ROOT, rel_path=f.rel_path, file_type="md", size=0, mtime=0.0, sha256="e")
        for f in files(20)
    ]
    verdict = check_roots([RootScan(ROOT, "ok", 20, 20)], stored, GuardLimits())
    assert check_deletes(verdict, make_plan(emptied, stored, verdict.scope), stored, GuardLimits()).refused


def test_each_root_is_judged_on_its_own_documents():
    other = "/share/other"
    stored = docs(20) + docs(20, other)
    scans = [RootScan(ROOT, "ok", 20, 20), RootScan(other, "ok", 2, 2)]
    verdict = check_roots(scans, stored, GuardLimits())
    check_deletes(verdict, make_plan(files(20) + files(2, other), stored, verdict.scope), stored, GuardLimits())
    assert len(verdict.refusals) == 1 and other in verdict.refusals[0]


@pytest.mark.parametrize("pattern", ["[", "a[b", "", "x[]"])
def test_an_invalid_pattern_is_a_usage_error(pattern):
    with pytest.raises(UsageError):
        check_patterns([pattern], "--include")


def test_valid_patterns_pass():
    assert check_patterns(["*.md", "a[bc].txt", "[[]literal", "[]]x"]) == ("*.md", "a[bc].txt", "[[]literal", "[]]x")


# --- discovery reports each root ----------------------------------------------------------------


def test_discover_scans_each_root(tmp_path, monkeypatch):
    ok, empty, hidden_only = tmp_path / "ok", tmp_path / "empty", tmp_path / "hidden"
    for d in (ok, empty, hidden_only):
        d.mkdir()
    (ok / "a.md").write_text("# A\n\nalpha")
    (ok / "b.xyz").write_bytes(b"\x00\x01")
    (hidden_only / ".secret.md").write_text("no")
    scans = []
    readable, skipped = discover([ok, empty, hidden_only, tmp_path / "gone"], scans=scans)
    assert [(s.status, s.walked, s.matched) for s in scans] == [
        ("ok", 2, 2),
        ("empty", 0, 0),
        ("empty", 0, 0),
        ("missing", 0, 0),
    ]
    scans = []
    discover([ok], include=["*.txt"], scans=scans)
    assert (scans[0].status, scans[0].walked, scans[0].matched) == ("unmatched", 2, 0)

    real_scandir = os.scandir

    def refuse(path):  # root cannot stop a read by permissions: make the listing fail instead
        if str(path) == str(ok.resolve()):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    scans = []
    assert discover([ok], scans=scans) == ([], [])
    assert scans[0].status == "unreadable" and scans[0].error == "cannot list it: permission denied"


# --- real runs ---------------------------------------------------------------------------------


def _tree(root, n=20):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"note{i:02d}.md").write_text(f"# Note {i}\n\nThe heron colony number {i} nests by the reservoir.\n")
    return root


def _documents(cli, db) -> int:
    done = cli("status", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["documents"]


def _last_run(cli, db) -> dict:
    return json.loads(cli("runs", "--db", db, "--json").stdout)[0]


def _setting(roots, db):
    """The run a case starts from, in-process (a CLI start less): the cases are the runs after it."""
    import quarry

    quarry.index(roots, db)


def test_an_emptied_root_fails_and_keeps_every_document(cli, tmp_path):
    tree, db = _tree(tmp_path / "tree"), tmp_path / "db"
    _setting([tree], db)  # the first run is the setting: in-process
    shutil.move(tree, tmp_path / "away")
    tree.mkdir()  # the mount point of a share that is not mounted
    done = cli("index", tree, "--db", db)
    assert done.returncode == 3, done.stderr
    assert (
        f"failed: {tree.resolve()}: no files under it" in done.stderr and "20 indexed documents are kept" in done.stderr
    )
    assert _documents(cli, db) == 20
    run = _last_run(cli, db)
    assert run["status"] == "partial" and run["deleted"] == 0 and run["errors"][0]["path"] == str(tree.resolve())
    done = cli("index", tree, "--db", db, "--allow-deletes")  # emptied on purpose
    assert done.returncode == 0 and _documents(cli, db) == 0, done.stderr


def test_a_removed_root_keeps_its_documents_and_other_roots_are_indexed(cli, tmp_path):
    a, b, db = _tree(tmp_path / "a", 8), _tree(tmp_path / "b", 3), tmp_path / "db"
    _setting([a, b], db)  # the first run is the setting: in-process
    shutil.rmtree(a)
    (b / "new.md").write_text("# New\n\nA kingfisher arrived.\n")
    done = cli("index", a, b, "--db", db, "--json")
    assert done.returncode == 3
    report = json.loads(done.stdout)
    assert report["added"] == 1 and report["deleted"] == 0
    assert report["errors"] == [{"path": str(a.resolve()), "error": "path not found; its 8 indexed documents are kept"}]
    assert _documents(cli, db) == 12


def test_a_pattern_that_matches_nothing_is_refused_and_recorded(cli, tmp_path):
    tree, db = _tree(tmp_path / "tree"), tmp_path / "db"
    _setting([tree], db)  # the first run is the setting: in-process
    done = cli("index", tree, "--db", db, "--include", "nothing-*.zzz")
    assert done.returncode == 4
    assert done.stderr.startswith("error: refused: --include 'nothing-*.zzz' leaves none of the 20 files under")
    assert _documents(cli, db) == 20
    run = _last_run(cli, db)
    assert run["status"] == "refused" and "--allow-deletes" in run["message"] and run["deleted"] == 0
    done = cli("index", tree, "--db", db, "--include", "[")
    assert done.returncode == 2 and "never closed" in done.stderr


def test_a_narrowed_include_and_a_mass_delete_are_refused_until_allowed(cli, tmp_path):
    tree, db = _tree(tmp_path / "tree"), tmp_path / "db"
    (tree / "extra.txt").write_text("A plain text note about the reservoir.\n")
    _setting([tree], db)  # the first run is the setting: in-process
    done = cli("index", tree, "--db", db, "--include", "note0*.md")  # keeps 10 of 21
    assert done.returncode == 4 and "would delete 11 of the 21 documents" in done.stderr
    gone = tmp_path / "gone"
    gone.mkdir()
    for i in range(15):
        shutil.move(tree / f"note{i:02d}.md", gone)
    dry = cli("index", tree, "--db", db, "--dry-run", "--json")
    assert dry.returncode == 0
    preview = json.loads(dry.stdout)
    assert preview["plan"]["removed"] == 15 and "would delete 15 of the 21" in preview["guard"]["refused"][0]
    assert "guard: the run would be refused" in cli("index", tree, "--db", db, "--dry-run").stdout
    assert cli("index", tree, "--db", db).returncode == 4 and _documents(cli, db) == 21
    done = cli("index", tree, "--db", db, "--allow-deletes")
    assert done.returncode == 0 and _documents(cli, db) == 6, done.stderr
    env = {"QUARRY_ALLOW_DELETES": "1"}  # the setting a deployment uses
    for i in range(5):
        (tree / f"note{15 + i:02d}.md").unlink()
    assert cli("index", tree, "--db", db, env=env).returncode == 0 and _documents(cli, db) == 1


def test_the_guard_holds_on_a_store_on_object_storage(cli, tmp_path, s3, monkeypatch):
    from s3server import new_bucket

    url = f"s3://{new_bucket(s3)}/store"
    env = {"QUARRY_STORE_CACHE": str(tmp_path / "cache")}
    tree = _tree(tmp_path / "tree")
    with monkeypatch.context() as m:  # the first run is the setting: in-process
        m.setenv("QUARRY_STORE_CACHE", env["QUARRY_STORE_CACHE"])
        _setting([tree], url)
    shutil.move(tree, tmp_path / "away")
    tree.mkdir()
    assert cli("index", tree, "--db", url, env=env).returncode == 3
    done = cli("status", "--db", url, "--json", env={"QUARRY_STORE_CACHE": str(tmp_path / "reader")})
    assert json.loads(done.stdout)["documents"] == 20
    tree.rmdir()
    shutil.move(tmp_path / "away", tree)
    for i in range(15):
        (tree / f"note{i:02d}.md").unlink()
    assert cli("index", tree, "--db", url, env=env).returncode == 4
    assert cli("index", tree, "--db", url, "--allow-deletes", env=env).returncode == 0
    done = cli("status", "--db", url, "--json", env={"QUARRY_STORE_CACHE": str(tmp_path / "reader")})
    assert json.loads(done.stdout)["documents"] == 5


def test_the_library_call_refuses_the_same_way(prefect_api, tmp_path):
    import quarry
    from quarry.core.errors import RunRefused

    tree, db = _tree(tmp_path / "tree"), tmp_path / "db"
    report = quarry.index(tree, db, embed_backend="hash")
    assert report["added"] == 20
    with pytest.raises(RunRefused, match="leaves none of the 20 files"):
        quarry.index([tree], db, include=("*.pdf",))
    assert quarry.index(tree, db, dry_run=True)["plan"]["unchanged"] == 20
