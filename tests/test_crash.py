"""kill -9 at every dangerous point of a run, then re-run: the store equals a clean run's.

Each crash is a real SIGKILL of a real ``quarry index`` process (``QUARRY_FAULT`` picks the
moment). While the killed run's debris is on disk, readers must still see the last committed
state.
"""

from __future__ import annotations

import json
import shutil
import signal

import pytest
from conftest import SAMPLE

import quarry
from quarry.core.faults import POINTS


def contents(db):
    """Everything a user can observe of an index, independent of ids and timestamps."""
    with quarry.open(db) as idx:
        con = idx.snapshot.con
        docs = sorted(con.execute("SELECT rel_path, sha256, title, n_chunks FROM documents").fetchall())
        chunks = sorted(
            con.execute(
                "SELECT d.rel_path, c.chunk_index, c.header, c.text, c.page_start FROM chunks c JOIN documents d USING (doc_id)"
            ).fetchall()
        )
        lance = idx.snapshot.table.to_arrow()
        vectors = sorted(zip(lance.column("path").to_pylist(), lance.column("text_hash").to_pylist()))
        bm25 = [(r.path, r.text) for r in idx.search("deploy rollback expenses review", k=10, mode="bm25").results]
    vectors = [(p.split("/tree/")[-1], h) for p, h in vectors]
    bm25 = [(p.split("/tree/")[-1], t) for p, t in bm25]
    return docs, chunks, vectors, bm25


def edit_tree(tree):
    deploys = tree / "runbooks" / "deploys.md"
    deploys.write_text(deploys.read_text() + "\n## Kestrel\n\nThe kestrel budget review happens in March.\n")
    (tree / "handbook" / "expenses.txt").unlink()
    (tree / "handbook" / "code-review.rst").rename(tree / "handbook" / "reviews.rst")
    (tree / "new.md").write_text("# New page\n\nA page added between runs about rollback drills.\n")


@pytest.fixture(scope="module")
def clean_contents(tmp_path_factory, prefect_api):
    import subprocess
    import sys

    base = tmp_path_factory.mktemp("clean")
    tree = base / "tree"
    shutil.copytree(SAMPLE, tree)
    edit_tree(tree)
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(base / "db")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return contents(base / "db")


# The second run's commit either writes a catalog layer and an index segment over the first
# (`layers`: the usual commit of a big store) or, as a small store's edit passes a quarter of it,
# merges everything into a new whole catalog (`base`). One case runs in the default suite; the
# rest are slow (each is three CLI runs).
LAYOUTS = {"layers": {"QUARRY_REBASE_SHARE": "100"}, "base": {}}
# The layout is chosen at the commit (quarry.store.layers.plan_merge): a run killed before it
# leaves the same debris under either, and its rerun's commit is the one the later points test.
# Those points run under one layout each.
BEFORE_COMMIT = {"embed": "base", "after-vectors": "base", "after-catalog": "layers"}


@pytest.mark.parametrize(
    "fault, layout",
    [
        pytest.param(p, layout, marks=() if (p, layout) == ("after-catalog", "layers") else pytest.mark.slow)
        for p in POINTS
        for layout in LAYOUTS
        if BEFORE_COMMIT.get(p, layout) == layout
    ],
)
def test_kill_then_rerun_equals_a_clean_run(fault, layout, tmp_path, cli, run_flow, clean_contents, monkeypatch):
    tree, db = tmp_path / "tree", tmp_path / "db"
    env = LAYOUTS[layout]
    shutil.copytree(SAMPLE, tree)
    with monkeypatch.context() as m:  # the first run is the setting, not the case: in-process, 5 s less
        for name, value in env.items():
            m.setenv(name, value)
        run_flow([tree], db)
    before = contents(db)
    edit_tree(tree)

    killed = cli("index", tree, "--db", db, env={**env, "QUARRY_FAULT": fault})
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    # Readers see the last committed state (or, killed after the rename, the new one) whole.
    after_kill = contents(db)
    assert after_kill == (clean_contents if fault == "after-commit" else before)

    rerun = cli("index", tree, "--db", db, "--json", env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert contents(db) == clean_contents
    report = json.loads(rerun.stdout)
    if fault == "after-commit":
        assert report["embedded_chunks"] == 0  # the committed run already did the work
    # the dead run's generation is gone; the retention keeps the current generation, the one before
    # and the layers they read
    pointer = json.loads((db / "CURRENT").read_text())
    current = pointer["generation"]
    kept = {current - 1, current} | set(pointer["layers"])
    assert sorted(p.name for p in db.glob("catalog-*.duckdb")) == [f"catalog-{g:06d}.duckdb" for g in sorted(kept)]
    assert len(pointer["layers"]) == (2 if layout == "layers" else 1)
