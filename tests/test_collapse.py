"""Search collapses copies: a passage in three files is one hit listing the other two; k is filled
with distinct passages; a copy the caller may not read is neither listed nor counted."""

from __future__ import annotations

import pytest
from test_dedup import DISCLAIMER, PAGE, write

import quarry

OTHERS = {
    "notes/deploys.md": "# Deploys\n\nDeploys go out from the release train; the rollout dashboard shows "
    "canaries. Approvals come from the owning team before the deploy starts.\n",
    "notes/buddy.md": "# Buddies\n\nA buddy answers questions in the first month and approves small changes; "
    "they watch the dashboard with new starters during their first deploy.\n",
    "notes/oncall.md": "# On-call\n\nShadow a full on-call shift before taking pages; the rollout of a fix "
    "follows the same deploy runbook and dashboard checks.\n",
}
QUERY = "buddy approves the deploy and watches the rollout dashboard"


@pytest.fixture(scope="module")
def store(tmp_path_factory, prefect_api):
    from quarry.flows.index import index_flow

    root = tmp_path_factory.mktemp("collapse")
    tree = root / "tree"
    write(tree / "handbook" / "onboarding.md", PAGE, age=300)
    write(tree / "onboarding-copy.md", PAGE, age=200)
    write(tree / "archive" / "onboarding-2024.md", PAGE.replace("what surprised you", "what you learned"), age=100)
    for rel, text in OTHERS.items():
        write(tree / rel, text + "\n" + DISCLAIMER + "\n")
    (root / "acl.yaml").write_text(
        '- path: "archive/**"\n  principals: [group:hr]\n- path: "**"\n  principals: [public]\n'
    )
    index_flow([str(tree)], db=str(root / "db"), overrides={"acl_rules": str(root / "acl.yaml")})
    return root / "db"


def onboarding(results) -> list:
    return [r for r in results if "onboarding" in r.path]


def test_three_copies_are_one_hit_listing_the_others(store):
    with quarry.open(store) as index:
        response = index.search(QUERY, k=4)
    hits = onboarding(response.results)
    assert len(hits) == 1
    assert sorted(c["path"].split("/tree/")[1] for c in hits[0].copies) == sorted(
        {"handbook/onboarding.md", "onboarding-copy.md", "archive/onboarding-2024.md"}
        - {hits[0].path.split("/tree/")[1]}
    )
    assert [r.rank for r in response.results] == list(range(1, len(response.results) + 1))


def test_k_is_filled_with_distinct_passages(store):
    with quarry.open(store) as index:
        collapsed = index.search(QUERY, k=4)
        every = index.search(QUERY, k=4, collapse=False)
    assert len(collapsed.results) == 4
    assert len({r.text for r in collapsed.results}) == 4
    assert len(onboarding(every.results)) == 3 and all(not r.copies for r in every.results)


def test_a_copy_the_caller_may_not_read_is_neither_shown_nor_counted(store):
    with quarry.open(store) as index:
        public = index.search(QUERY, k=4, principals=[])
        hr = index.search(QUERY, k=4, principals=["group:hr"])
    assert all("archive/" not in r.path for r in public.results)
    assert all("archive/" not in c["path"] for r in public.results for c in r.copies)
    assert [len(r.copies) for r in onboarding(public.results)] == [1]
    assert [len(r.copies) for r in onboarding(hr.results)] == [2]


def test_cli_shows_copies_and_no_collapse_shows_all(store, cli):
    done = cli("search", QUERY, "--db", store, "-k", "4", "--copies")
    assert done.returncode == 0, done.stderr
    assert "+2 copies" in done.stdout and "onboarding-copy.md" in done.stdout
    done = cli("search", QUERY, "--db", store, "-k", "4", "--no-collapse", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("onboarding") >= 3


def test_http_request_takes_collapse(store):
    from quarry.api.schemas import SearchRequest

    with quarry.open(store) as index:
        on = SearchRequest(query=QUERY, k=4).run(index, None)
        off = SearchRequest(query=QUERY, k=4, collapse=False).run(index, None)
    assert sum("onboarding" in r["path"] for r in on["results"]) == 1
    assert sum("onboarding" in r["path"] for r in off["results"]) == 3


def test_a_catalog_from_before_the_signals_searches_and_exports(tmp_path, run_flow):
    import duckdb

    from quarry.store.pointer import read_pointer

    tree, db = tmp_path / "tree", tmp_path / "db"
    write(tree / "a.md", PAGE)
    write(tree / "b.md", PAGE)
    run_flow([tree], db)
    con = duckdb.connect(str(db / read_pointer(db).catalog))
    for column in (
        "content_hash",
        "minhash",
        "lsh_bands",
        "dup_cluster",
        "dup_of",
        "dup_similarity",
        "lang",
        "pii_total",
    ):
        con.execute(f"ALTER TABLE documents DROP COLUMN {column}")
    con.close()
    with quarry.open(db) as index:
        assert len(index.search(QUERY, k=4).results) == 2  # nothing to collapse by: both copies
        report = index.export(tmp_path / "out", "jsonl")
    assert report.rows["documents"] == 2


def test_a_catalog_from_before_the_chunk_signals_searches_with_filters(tmp_path, run_flow):
    """A store an older quarry wrote lacks today's chunk columns (the signals, the boilerplate
    flag): a filtered search, which numbers the live chunks in a view of every column, reads the
    missing ones as NULL instead of failing on them."""
    import duckdb

    from quarry.retrieval.corpus.signals import CHUNK_COLUMNS
    from quarry.store.pointer import read_pointer

    tree, db = tmp_path / "tree", tmp_path / "db"
    write(tree / "a.md", PAGE)
    write(tree / "b.md", PAGE)
    run_flow([tree], db)
    con = duckdb.connect(str(db / read_pointer(db).catalog))
    for column in dict.fromkeys((*CHUNK_COLUMNS, "boilerplate")):
        con.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
    con.close()
    with quarry.open(db) as index:
        found = index.search(QUERY, k=4, filters="file_type = 'md'", collapse=False)
        assert len(found.results) == 2
        assert index.search(QUERY, k=4, filters="lang = 'en'", collapse=False).results == []  # NULL here


def test_copies_are_capped_and_counted_in_full(store, monkeypatch):
    import io

    from rich.console import Console

    from quarry.cli import output
    from quarry.search import collapse

    monkeypatch.setattr(collapse, "COPIES_LIMIT", 1)
    with quarry.open(store) as index:
        hr = index.search(QUERY, k=4, principals=["group:hr"])
        public = index.search(QUERY, k=4, principals=[])
    [hit] = onboarding(hr.results)
    assert len(hit.copies) == 1 and hit.copies_total == 2
    assert [r.copies_total for r in onboarding(public.results)] == [1]  # readable copies only
    assert all(r.copies_total == 0 for r in hr.results if r is not hit)
    assert hit.to_dict()["copies_total"] == 2
    buffer = io.StringIO()
    output.print_results(hr, console=Console(file=buffer, width=200), copies=True)
    assert "+2 copies" in buffer.getvalue() and "1 more" in buffer.getvalue()
