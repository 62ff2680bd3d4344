"""The --where language and Filter.build: exact SQL, bound values, errors, hostile input."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from quarry.core.errors import UsageError
from quarry.search.filters import Filter, parse_where, tokenize


@pytest.mark.parametrize(
    "expr", ["file_type = 'pdf'", "file_type=pdf", "file_type = pdf", 'FILE_TYPE == "PDF"', "type = .pdf"]
)
def test_three_spellings_of_one_condition(expr):
    assert parse_where(expr).sql() == ("(d.file_type = ?)", ["pdf"])


@pytest.mark.parametrize(
    "expr, sql, params",
    [
        ("size > 1000", "(d.size > ?)", [1000]),
        ("n_pages <= 3 AND file_type != md", "(d.n_pages <= ?) AND (d.file_type != ?)", [3, "md"]),
        ("title LIKE '%Handbook%'", "(d.title LIKE ?)", ["%Handbook%"]),
        ("path NOT GLOB '*/drafts/*'", "(d.path NOT GLOB ?)", ["*/drafts/*"]),
        ("title ILIKE 'read%'", "(d.title ILIKE ?)", ["read%"]),
        ("file_type IN (pdf, 'docx', \"md\")", "(d.file_type IN (?, ?, ?))", ["pdf", "docx", "md"]),
        ("doc_id NOT IN ('a', 'b')", "(d.doc_id NOT IN (?, ?))", ["a", "b"]),
        ("page_start IS NULL", "(c.page_start IS NULL)", []),
        ("page_end is not null", "(c.page_end IS NOT NULL)", []),
        ("section = Intro", "(s.title = ?)", ["Intro"]),
        ("chunk_index < 2", "(c.chunk_index < ?)", [2]),
        ("page = 3", "(c.page_start <= ? AND c.page_end >= ?)", [3, 3]),
        (
            "metadata.author = 'Ada Lovelace'",
            "(json_extract_string(d.metadata, ?) = ?)",
            ['$."author"', "Ada Lovelace"],
        ),
        (
            "metadata.year >= 2020",
            "(TRY_CAST(json_extract_string(d.metadata, ?) AS DOUBLE) >= ?)",
            ['$."year"', 2020.0],
        ),
        ("metadata.team IN (db, web)", "(json_extract_string(d.metadata, ?) IN (?, ?))", ['$."team"', "db", "web"]),
        ("mtime >= 2024-05-01T12:30", "(d.mtime >= ?)", [dt.datetime(2024, 5, 1, 12, 30)]),
        ("mtime = 2024-05-01", "(d.mtime >= ? AND d.mtime < ?)", [dt.datetime(2024, 5, 1), dt.datetime(2024, 5, 2)]),
        ("modified <= 2024-05-01", "(d.mtime < ?)", [dt.datetime(2024, 5, 2)]),
        ("mtime > '2024-05-01'", "(d.mtime >= ?)", [dt.datetime(2024, 5, 2)]),
    ],
)
def test_where_sql_is_whitelisted_columns_and_placeholders(expr, sql, params):
    assert parse_where(expr).sql() == (sql, params)


@pytest.mark.parametrize(
    "expr, message",
    [
        ("", "empty"),
        ("nosuch = 1", "unknown column 'nosuch'"),
        ("file_type = 'pdf", "unterminated quote"),
        ("file_type = pdf OR file_type = md", "OR is not supported"),
        ("file_type pdf", "expected an operator"),
        ("size > big", "whole number"),
        ("size LIKE '1%'", "needs a text column"),
        ("mtime > yesterday", "not a date"),
        ("file_type IN pdf", "expected ( after IN"),
        ("file_type IN (pdf", "expected )"),
        ("file_type = pdf title = x", "expected AND"),
        ("metadata.a'b = 1", "unterminated quote"),
        ("metadata.a;b = 1", "may hold only"),
        ("file_type = AND", "expected a value"),
        ("NOT file_type = pdf", "expected a column"),
        ("file_type NOT = pdf", "NOT must be followed"),
        ("page IN (1, 2)", "page takes"),
        ("path = 'a' ; DROP TABLE chunks", "expected AND before ';'"),
    ],
)
def test_bad_where_is_a_usage_error_naming_the_problem(expr, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_where(expr)


@pytest.mark.parametrize(
    "expr, value",
    [
        ("file_type = 'pdf'' OR 1=1 --'", "pdf' or 1=1 --"),
        ("title = 'x\"); DROP TABLE chunks; --'", 'x"); DROP TABLE chunks; --'),
        ('title = "a"" OR ""1""=""1"', 'a" OR "1"="1'),
        ("title = '''; DELETE FROM documents; --'", "'; DELETE FROM documents; --"),
    ],
)
def test_hostile_values_stay_values(expr, value):
    sql, params = parse_where(expr).sql()
    assert sql.count("?") == 1 and "DROP" not in sql and "DELETE" not in sql and "OR 1" not in sql
    assert params == [value]


def test_tokenizer_unquotes_and_keeps_positions():
    toks = tokenize("a = 'it''s' AND b IN (1,2)")
    assert [(t.kind, t.text) for t in toks] == [
        ("word", "a"),
        ("op", "="),
        ("str", "it's"),
        ("word", "AND"),
        ("word", "b"),
        ("word", "IN"),
        ("punct", "("),
        ("word", "1"),
        ("punct", ","),
        ("word", "2"),
        ("punct", ")"),
    ]
    assert toks[2].pos == 4


def test_build_combines_every_part():
    f = Filter.build(
        where=["size > 10"],
        path=["/docs/*.md", "notes"],
        since="2024-01-01",
        until="2024-01-31",
        file_type=["PDF", ".md"],
        doc_id="abc",
    )
    sql, params = f.sql()
    assert sql == (
        "(d.size > ?) AND (d.path GLOB ? OR d.rel_path GLOB ? OR d.path GLOB ? OR d.rel_path GLOB ? OR d.path GLOB ?"
        " OR d.rel_path GLOB ? OR d.path GLOB ?)"
        " AND (d.mtime >= ?) AND (d.mtime < ?) AND (d.file_type IN (?, ?)) AND (d.doc_id = ?)"
    )
    assert params == [
        10,
        "/docs/*.md",
        "notes",
        "*/notes",
        "notes/*",
        "*/notes/*",
        "notes!/*",
        "*/notes!/*",
        dt.datetime(2024, 1, 1),
        dt.datetime(2024, 2, 1),
        "pdf",
        "md",
        "abc",
    ]
    assert bool(f) and not Filter.build() and Filter.build(where=[], path=None) == Filter()


def test_since_until_take_dates_datetimes_and_relative_spans():
    assert Filter.build(since=dt.date(2024, 3, 1)).sql()[1] == [dt.datetime(2024, 3, 1)]
    assert Filter.build(until=dt.date(2024, 3, 1)).sql()[1] == [dt.datetime(2024, 3, 2)]
    aware = dt.datetime(2024, 3, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert Filter.build(since=aware).sql()[1] == [dt.datetime(2024, 3, 1, 10)]
    week_ago = Filter.build(since="1w").sql()[1][0]
    assert abs((dt.datetime.now(dt.UTC).replace(tzinfo=None) - week_ago) - dt.timedelta(weeks=1)) < dt.timedelta(
        minutes=1
    )
    with pytest.raises(UsageError, match="since"):
        Filter.build(since="last tuesday")


def test_filters_are_hashable_cache_keys():
    assert hash(Filter.build(file_type="pdf")) == hash(Filter.build(where=["file_type = pdf"]))
    assert Filter.build(file_type="pdf") == Filter.build(where=["file_type = pdf"])
    assert Filter.build(file_type="pdf") != Filter.build(file_type="md")
    assert "file_type" in str(Filter.build(file_type="pdf"))
