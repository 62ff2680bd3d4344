"""Names as written and as used: the aliases a document gives itself (ticker symbols, short names it
defines, an abbreviation after its name) reach its card, so a question naming the short form finds it."""

from __future__ import annotations

import pytest

import quarry
from quarry.ingest.facets import aliases, stated_facets

COVER = """UNITED STATES SECURITIES AND EXCHANGE COMMISSION
FORM 10-K
ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d) OF THE SECURITIES EXCHANGE ACT OF 1934
For the fiscal year ended January 1, 2023
JOHNSON & JOHNSON
(Exact name of registrant as specified in its charter)
Title of each class Trading Symbol Name of each exchange on which registered
Common Stock, Par Value $1.00 JNJ New York Stock Exchange
0.650% Notes Due May 2024 JNJ24C New York Stock Exchange
Indicate by check mark if the registrant is a well-known seasoned issuer.
Item 1. Business
Johnson & Johnson (“J&J”, “JnJ” or the “Company”) and its subsidiaries are engaged in the research and
development, manufacture and sale of a broad range of products in the health care field.
"""


@pytest.mark.parametrize(
    "opening,names,expected",
    [
        # JNJ24C is a note, "JnJ" the ticker again (case aside), "the Company" every filing
        (COVER, ["JOHNSON & JOHNSON"], ["JNJ", "J&J"]),
        (
            "3M Company was incorporated in 1929. The Company's ticker symbol is MMM. As used herein, the term “3M” or "
            "“Company” includes 3M Company and its subsidiaries.",
            [],
            ["MMM", "3M"],
        ),
        ("MGM Resorts International (NYSE: MGM) owns casinos.", ["MGM Resorts International"], ["MGM"]),
        (
            "The World Health Organization (WHO) publishes this report every year.",
            ["World Health Organization"],
            ["WHO"],
        ),
        # an abbreviation whose letters do not begin the name's words is not its name
        ("The World Health Organization (2019) report.", ["World Health Organization"], []),
        ("We, the registrant (the “Company”), report.", ["registrant"], []),
        ("A paper about fusion functions, from 2023.", ["A paper"], []),
    ],
)
def test_aliases_a_document_gives_itself(opening, names, expected):
    assert aliases(opening, names) == expected


def test_aliases_join_the_stated_facets():
    facets = stated_facets(COVER)
    assert facets["company"] == "JOHNSON & JOHNSON" and facets["aliases"] == "JNJ, J&J"
    # the title a file's metadata gives is one of its names
    assert stated_facets("Retrieval Augmented Generation (RAG) explained.", "Retrieval Augmented Generation") == {
        "aliases": "RAG"
    }
    assert stated_facets("Plain notes about nothing in particular.") == {}


def _index(tmp_path, run_flow):
    tree = tmp_path / "tree"
    tree.mkdir()
    body = (
        "Net sales rose in every segment and the dividend was raised again this year, while operating "
        "cash flow paid for the capital expenditure of the new plants. "
    ) * 6
    (tree / "filing-a.txt").write_text(COVER + "\n\n" + body)
    other = COVER.replace("JOHNSON & JOHNSON", "ACME HOLDINGS").replace("Johnson & Johnson", "Acme Holdings")
    other = other.replace("JNJ", "ACH").replace("“J&J”, “JnJ” or ", "")
    (tree / "filing-b.txt").write_text(other + "\n\n" + body)
    db = tmp_path / "db"
    run_flow([tree], db)
    return db


def _best_body(db, question: str) -> list[tuple[str, float]]:
    """Each file's best chunk that does not hold the cover (where the short form is written)."""
    best: dict[str, float] = {}
    with quarry.open(db) as idx:
        # the two bodies are copies of each other: each file's own hit is wanted, so no collapse
        for hit in idx.search(question, k=10, collapse=False).results:
            if "Trading Symbol" not in hit.text and "(“" not in hit.text:
                best.setdefault(hit.path.rsplit("/", 1)[-1], hit.score)
    return sorted(best.items(), key=lambda kv: -kv[1])


def test_a_question_naming_the_short_form_finds_the_document(tmp_path, run_flow):
    db = _index(tmp_path, run_flow)
    for question in ("JnJ dividend raised", "What was JNJ capital expenditure?"):
        # the two filings' bodies are the same words: only the card's alias tells them apart
        (first, top), (second, runner_up) = _best_body(db, question)
        assert first == "filing-a.txt" and top > runner_up, question
    with quarry.open(db) as idx:
        cards = idx.sql("SELECT rel_path, metadata->>'aliases' AS aliases FROM documents ORDER BY rel_path")
    assert [tuple(r) for r in cards.rows] == [("filing-a.txt", "JNJ, J&J"), ("filing-b.txt", "ACH")]


def test_without_aliases_the_bodies_tie(tmp_path, run_flow, monkeypatch):
    import quarry.ingest.facets as facets

    monkeypatch.setattr(facets, "MAX_ALIASES", 0)
    db = _index(tmp_path, run_flow)
    (_, top), (_, runner_up) = _best_body(db, "JnJ dividend raised")
    assert top == pytest.approx(runner_up)  # what the alias test above tells apart
