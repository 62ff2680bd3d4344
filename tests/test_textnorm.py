import pytest

from quarry.retrieval.textnorm import bm25_text, tokens


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hello, World", ["hello", "world"]),
        ("E11000", ["e11000", "e", "11000"]),
        ("FY2018", ["fy2018", "fy", "2018"]),
        ("v1.4.4", ["v144", "v1", "4", "4", "144", "v", "1"]),
        ("1.4.4", ["144", "1", "4", "4"]),
        ("ISO-8601", ["iso8601", "iso", "8601"]),
        ("utf-8", ["utf8", "utf", "8"]),
        ("1,000,000", ["1000000", "1", "000", "000"]),
        ("naïve Café", ["naive", "cafe"]),
        ("Q2 2024", ["q2", "q", "2", "2024"]),
        ("", []),
        ("!!! ---", []),
    ],
)
def test_tokens(text, expected):
    assert tokens(text) == expected


def test_query_and_document_sides_meet():
    doc = set(bm25_text("upgrading to v1.4.4 fixed error E11000 in FY2018").split())
    for query in ("v1.4.4", "E11000", "2018", "FY2018", "11000"):
        assert set(bm25_text(query).split()) & doc, query
