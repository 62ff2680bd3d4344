"""Duplicate documents: exact and near copies cluster, a shared disclaimer does not, and clusters
stay right across incremental runs (a copy added, the canonical deleted, a copy edited away),
through the catalog's layers and a rollback."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import quarry
from quarry.retrieval.corpus import minhash
from quarry.retrieval.corpus.clusters import Member, clusters

DISCLAIMER = "This document is internal. Do not forward it outside the company without approval from legal."
PAGE = f"""# Week two

Ship your starter change to production following the deploy runbook. Your buddy approves the
deploy and watches the rollout dashboard with you. After the rollout, write a short note in the
team channel about what you shipped and what surprised you. Pair with your buddy on one on-call
shift in week three, shadowing each page they take and reading the incident write-ups together.

{DISCLAIMER}
"""
EXPENSES = f"""# Expenses

Submit receipts within thirty days through the finance portal; travel needs a manager approval
before booking. Meals are capped per day by city tier, and hotels by the travel policy's table.

{DISCLAIMER}
"""


def write(path, text, age=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    t = time.time() - age
    os.utime(path, (t, t))


def dups(db) -> dict[str, str | None]:
    """rel_path -> rel_path of the document it duplicates (None: not a copy)."""
    with quarry.open(db) as index:
        rows = index.sql("SELECT rel_path, doc_id, dup_of FROM documents").records()
    by_id = {r["doc_id"]: r["rel_path"] for r in rows}
    return {r["rel_path"]: by_id.get(r["dup_of"]) if r["dup_of"] else None for r in rows}


@pytest.mark.parametrize(
    "edit, similar",
    [
        (lambda t: t, True),  # a renamed copy
        (lambda t: t.replace("\n", "  \n").upper(), True),  # re-saved: layout and case
        (lambda t: t.replace("what surprised you", "what you learned"), True),  # one phrase edited
        (lambda t: EXPENSES, False),  # only the disclaimer shared
    ],
)
def test_signatures_find_copies_and_not_shared_disclaimers(edit, similar):
    a, b = minhash.signature(PAGE), minhash.signature(edit(PAGE))
    assert (minhash.similarity(a, b) >= 0.8) is similar
    assert (minhash.content_hash(PAGE) == minhash.content_hash(edit(PAGE))) is (
        edit(PAGE).lower().split() == PAGE.lower().split()
    )


def test_clusters_pick_the_oldest_then_the_shortest_path():
    sig = minhash.signature(PAGE)
    members = {
        d: Member(d, path, mtime, "h", sig)
        for d, path, mtime in (
            ("a", "/t/archive/x.md", 1),
            ("b", "/t/x.md", 2),
            ("c", "/t/y.md", 1),
            ("d", "/t/z.md", 5),
        )
    }
    other = Member("e", "/t/e.md", 0, "other", np.zeros(minhash.NUM_PERM, dtype=np.uint32))
    got = clusters({**members, "e": other}, [("a", "b"), ("b", "c"), ("c", "e")], 0.8)
    assert {d: (a.cluster, a.of) for d, a in got.items()} == {"a": ("c", "c"), "b": ("c", "c"), "c": ("c", None)}
    assert "d" not in got and "e" not in got  # no candidate pair: no cluster (the LSH index finds pairs)


def test_clusters_stay_right_across_runs(tmp_path, run_flow):
    tree, db = tmp_path / "tree", tmp_path / "db"
    write(tree / "handbook" / "onboarding.md", PAGE, age=300)
    write(tree / "other" / "expenses.md", EXPENSES, age=200)
    run_flow([tree], db)
    assert dups(db) == {"handbook/onboarding.md": None, "other/expenses.md": None}

    # add an exact copy and a near copy: both point at the oldest
    write(tree / "onboarding-copy.md", PAGE, age=100)
    write(tree / "archive" / "onboarding-2024.md", PAGE.replace("what surprised you", "what you learned"), age=50)
    run_flow([tree], db)
    assert dups(db) == {
        "handbook/onboarding.md": None,
        "other/expenses.md": None,
        "onboarding-copy.md": "handbook/onboarding.md",
        "archive/onboarding-2024.md": "handbook/onboarding.md",
    }
    with quarry.open(db) as index:
        sims = dict(index.sql("SELECT rel_path, dup_similarity FROM documents WHERE dup_of IS NOT NULL").rows)
    assert sims["onboarding-copy.md"] == 1.0 and 0.8 <= sims["archive/onboarding-2024.md"] < 1.0

    # delete the canonical: the next oldest takes over, without re-reading the other copies
    (tree / "handbook" / "onboarding.md").unlink()
    report = run_flow([tree], db)
    assert report["added"] == report["updated"] == 0
    assert dups(db) == {
        "other/expenses.md": None,
        "onboarding-copy.md": None,
        "archive/onboarding-2024.md": "onboarding-copy.md",
    }

    # edit a copy beyond the threshold: it leaves the cluster, and the cluster of one dissolves
    write(tree / "archive" / "onboarding-2024.md", "Gardening: water tomatoes at dawn, twice a week in summer.")
    run_flow([tree], db)
    assert dups(db) == {"other/expenses.md": None, "onboarding-copy.md": None, "archive/onboarding-2024.md": None}

    # a rollback brings the earlier clusters back with the rest of the generation
    quarry_rollback(db)
    assert dups(db)["archive/onboarding-2024.md"] == "onboarding-copy.md"


def quarry_rollback(db):
    from quarry.store.rollback import rollback

    rollback(db)
