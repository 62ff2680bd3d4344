"""Search filters: which chunks a search may return, applied inside both retrievers.

A :class:`Filter` is a conjunction of conditions over catalog columns. It is built from
command-line style pieces (``Filter.build(where=[...], path=[...], since=..., ...)``) and
turned into a DuckDB ``WHERE`` clause whose column names come from a fixed whitelist and whose
values are always bound parameters. User text never becomes SQL.

``where`` syntax (keywords are case-insensitive)::

    condition [AND condition]...
    condition := column OP value            OP: = == != <> < <= > >=
               | column [NOT] IN (value, ...)
               | column [NOT] LIKE value    (also ILIKE; % and _ wildcards)
               | column [NOT] GLOB value    (* ? [abc] wildcards)
               | column IS [NOT] NULL
    value     := 'single quoted' ('' escapes a quote) | "double quoted" | bare-word

A bare word is any run of characters other than blanks, quotes, ``( ) , = < > !``, so
``file_type=pdf``, ``file_type = pdf`` and ``file_type = 'pdf'`` mean the same. Columns are
those of ``documents`` and ``chunks`` listed in :data:`COLUMNS` (``type`` is short for
``file_type``, ``modified`` for ``mtime``, ``section`` is the section title), plus
``metadata.<key>`` for a key of the document's JSON metadata (compared as text, or as a number
with ``< <= > >=`` and a numeric value). Dates are ISO (``2024-05-01``, ``2024-05-01T12:00``)
in UTC; a date without a time compared with ``=`` means that whole day. There is no ``OR``:
use ``IN (...)``.

Why a small hand-written parser rather than a SQL parser library (sqlglot and the like): the
point of this module is what it refuses. A general parser accepts any SQL, whose tree would then
have to be walked and whitelisted node by node; here the tokenizer can only emit whitelisted
column expressions, fixed operators and ``?`` parameters, which ``tests/test_filters.py`` checks
as exact SQL strings and ``tests/reliability/test_abuse.py`` against hostile input. The grammar
is a few hundred lines and has no dependency. (No speed measurement decided this; a filter is
parsed once per query.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from quarry.core.errors import UsageError
from quarry.core.paths import ARCHIVE_SEP, display
from quarry.core.principals import caller

# name -> (SQL expression, value type). The SQL text of a filter is built only from these.
COLUMNS: dict[str, tuple[str, str]] = {
    "doc_id": ("d.doc_id", "str"),
    "path": ("d.path", "str"),
    "root": ("d.root", "str"),
    "rel_path": ("d.rel_path", "str"),
    "file_type": ("d.file_type", "type"),
    "size": ("d.size", "int"),
    "mtime": ("d.mtime", "time"),
    "sha256": ("d.sha256", "str"),
    "title": ("d.title", "str"),
    "summary": ("d.summary", "str"),
    "n_pages": ("d.n_pages", "int"),
    "n_sections": ("d.n_sections", "int"),
    "n_chunks": ("d.n_chunks", "int"),
    "indexed_at": ("d.indexed_at", "time"),
    "run_id": ("d.run_id", "str"),
    "chunk_id": ("c.chunk_id", "str"),
    "section_index": ("c.section_index", "int"),
    "chunk_index": ("c.chunk_index", "int"),
    "start_char": ("c.start_char", "int"),
    "end_char": ("c.end_char", "int"),
    "page_start": ("c.page_start", "int"),
    "page_end": ("c.page_end", "int"),
    "header": ("c.header", "str"),
    "text": ("c.text", "str"),
    "text_hash": ("c.text_hash", "str"),
    "n_tokens": ("c.n_tokens", "int"),
    "section": ("s.title", "str"),
    "page": ("c.page_start", "page"),  # a chunk "is on" every page from page_start to page_end
    # corpus signals (docs/corpus.md): the document's duplicate cluster and language, the chunk's own
    "dup_cluster": ("d.dup_cluster", "str"),
    "dup_of": ("d.dup_of", "str"),
    "dup_similarity": ("d.dup_similarity", "num"),
    "doc_lang": ("d.lang", "str"),
    "lang": ("c.lang", "str"),
    "norm_hash": ("c.norm_hash", "str"),
    **{f"pii_{k}": (f"c.pii_{k}", "int") for k in ("email", "phone", "card", "iban", "national_id", "secret", "total")},
    "q_words": ("c.q_words", "int"),
    **{q: (f"c.{q}", "num") for q in ("q_mean_word", "q_alpha", "q_dup_lines", "q_top_2gram", "q_dup_5gram")},
    "boilerplate": ("c.boilerplate", "num"),  # share of the chunk's lines that are boilerplate in its root
}
ALIASES = {"type": "file_type", "modified": "mtime"}
# The permission clause (Filter.readable_by): the document shares a principal with the caller.
# One parameter, the caller's principals joined by newlines (principals hold no control characters).
ACL_SQL = "list_has_any(d.principals, string_split(?, chr(10)))"
_METADATA_KEY = re.compile(r"^[A-Za-z0-9_\-]+$")
_COMPARE = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_KEYWORDS = {"and", "or", "not", "in", "like", "ilike", "glob", "is", "null"}
_RELATIVE = re.compile(r"^(\d+)\s*([hdw])$")


@dataclass(frozen=True)
class Filter:
    """A conjunction of conditions; ``clauses`` are ``(sql, params)`` pairs.

    Hashable, so an index can cache the rows a filter keeps. Build one with :meth:`build`.
    """

    clauses: tuple[tuple[str, tuple], ...] = ()
    description: tuple[str, ...] = field(default=(), compare=False)

    def __bool__(self) -> bool:
        return bool(self.clauses)

    @property
    def needs_sections(self) -> bool:
        return any("s.title" in sql for sql, _ in self.clauses)

    def sql(self) -> tuple[str, list]:
        """The ``WHERE`` condition (``?`` placeholders) and its parameters."""
        if not self.clauses:
            return "TRUE", []
        return " AND ".join(f"({sql})" for sql, _ in self.clauses), [p for _, ps in self.clauses for p in ps]

    def bound_sql(self) -> tuple[str, list]:
        """:meth:`sql` with every text parameter in the form the catalog stores: a name holding
        surrogate-escaped bytes (not UTF-8, typed or pasted) becomes its display form, the form
        ``documents.path`` keeps, so DuckDB can bind and match it."""
        condition, params = self.sql()
        return condition, [_bindable(p) for p in params]

    def __and__(self, other: Filter) -> Filter:
        return Filter(self.clauses + other.clauses, self.description + other.description)

    @classmethod
    def readable_by(cls, principals) -> Filter:
        """Only documents that one of ``principals`` (``public`` is implied) may read: the
        permission check, a clause like any other, so it holds inside both retrievers before
        they take their top candidates, and in exports. A document whose principals are NULL
        (not yet decided) matches no caller."""
        names = caller(principals)
        return cls(((ACL_SQL, ("\n".join(names),)),), (f"readable by {', '.join(names)}",))

    @property
    def restricted(self) -> bool:
        """Whether a permission clause (:meth:`readable_by`) is part of this filter."""
        return any(sql == ACL_SQL for sql, _ in self.clauses)

    def permissions(self) -> Filter:
        """Only the permission clauses of this filter (what the caller may read, whatever else is asked)."""
        return Filter(
            tuple(c for c in self.clauses if c[0] == ACL_SQL),
            tuple(d for d in self.description if d.startswith("readable by ")),
        )

    def without_permissions(self) -> Filter:
        """This filter less its permission clauses: for a catalog written before documents carried
        principals, where every document is public and the clause has no column to read."""
        return Filter(
            tuple(c for c in self.clauses if c[0] != ACL_SQL),
            tuple(d for d in self.description if not d.startswith("readable by ")),
        )

    def __str__(self) -> str:
        return " AND ".join(self.description) or "(none)"

    @classmethod
    def build(
        cls,
        where: list[str] | tuple[str, ...] | str = (),
        path: list[str] | tuple[str, ...] | str = (),
        since: str | date | datetime | None = None,
        until: str | date | datetime | None = None,
        file_type: list[str] | tuple[str, ...] | str = (),
        doc_id: list[str] | tuple[str, ...] | str = (),
    ) -> Filter:
        """A filter from command-line style parts, all of which must hold.

        ``where``: expressions in the syntax above (each one may join conditions with AND).
        ``path``: globs, any of which may match; an absolute pattern (or a URL) matches the file's path,
        a relative one its path under the indexed root or any tail of its path, and a pattern
        without wildcards also matches everything under that directory (or in that archive:
        members are ``archive.zip!/dir/file.pdf``).
        ``since``/``until``: the file's modification time, inclusive (an ISO date or datetime,
        UTC, or ``<n>h``/``<n>d``/``<n>w`` ago; ``until`` with a date includes that day).
        ``file_type``: types such as ``pdf`` or ``.md``, any of which may match.
        ``doc_id``: document ids, any of which may match.

        Raises :class:`~quarry.core.errors.UsageError` on anything it cannot read.
        """
        result = cls()
        for expr in _listify(where):
            result = result & parse_where(expr)
        paths = _listify(path)
        if paths:
            result = result & _path_filter(paths)
        if since is not None and since != "":
            start = _instant(since, "since", end_of_day=False)
            result = result & cls(((f"{COLUMNS['mtime'][0]} >= ?", (start,)),), (f"mtime >= {start.isoformat()}",))
        if until is not None and until != "":
            end = _instant(until, "until", end_of_day=True)
            result = result & cls(((f"{COLUMNS['mtime'][0]} < ?", (end,)),), (f"mtime < {end.isoformat()}",))
        types = [_file_type(t) for t in _listify(file_type)]
        if types:
            result = result & _in("file_type", types)
        ids = _listify(doc_id)
        if ids:
            result = result & _in("doc_id", ids)
        return result


FILTER_MARKER = "TRUE /* filter */"


def with_filter(sql: str, filters: Filter | None) -> tuple[str, list]:
    """``sql`` (a file of ``sql/`` holding the marker ``TRUE /* filter */``) with the marker replaced
    by the filter's condition, and the filter's parameters; unchanged without a filter."""
    if FILTER_MARKER not in sql:
        raise AssertionError("the SQL has no filter marker")
    if not filters:
        return sql, []
    condition, params = filters.bound_sql()
    return sql.replace(FILTER_MARKER, f"({condition})"), params


def _bindable(value):
    if isinstance(value, str):
        return display(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_bindable(v) for v in value)
    return value


def _listify(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [v for v in value if v is not None and str(v).strip()]


def _file_type(value: str) -> str:
    value = str(value).strip().lower().lstrip(".")
    if not value:
        raise UsageError("an empty file type was given")
    return value


def _in(column: str, values: list) -> Filter:
    expr, kind = COLUMNS[column]
    bound = tuple(_convert(column, kind, v) for v in values)
    if len(bound) == 1:  # the same clause as `column = value`, so both share a cache entry
        return Filter(((f"{expr} = ?", bound),), (f"{column} = {values[0]!r}",))
    marks = ", ".join("?" for _ in bound)
    return Filter(((f"{expr} IN ({marks})", bound),), (f"{column} IN ({', '.join(map(str, values))})",))


# --- paths --------------------------------------------------------------------------------------

_GLOB_CHARS = re.compile(r"[*?\[]")


def _path_filter(patterns: list[str]) -> Filter:
    ors, params = [], []
    for raw in patterns:
        pattern = raw.strip()
        if pattern.startswith("~"):
            import os

            pattern = os.path.expanduser(pattern)
        forms = [pattern]
        if not _GLOB_CHARS.search(pattern):
            forms.append(pattern.rstrip("/") + "/*")  # a directory: everything under it
            if not pattern.endswith("/"):
                forms.append(pattern + ARCHIVE_SEP + "*")  # an archive: its members
        for form in forms:
            if form.startswith("/") or "://" in form:  # a path, or a URL (s3://bucket/docs/*.md)
                ors.append("d.path GLOB ?")
                params.append(form)
            else:
                form = form.removeprefix("./")
                ors.append("d.rel_path GLOB ? OR d.path GLOB ?")
                params.extend([form, "*/" + form])
    return Filter(((" OR ".join(ors), tuple(params)),), (f"path GLOB any of {patterns}",))


# --- dates --------------------------------------------------------------------------------------


def _instant(value, name: str, end_of_day: bool) -> datetime:
    """A naive UTC datetime; for a date alone, its start (or the next day's start)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, date):
        day = datetime.combine(value, time())
        return day + timedelta(days=1) if end_of_day else day
    text = str(value).strip()
    rel = _RELATIVE.match(text.lower())
    if rel:
        amount, unit = int(rel.group(1)), rel.group(2)
        delta = {"h": timedelta(hours=amount), "d": timedelta(days=amount), "w": timedelta(weeks=amount)}[unit]
        return datetime.now(UTC).replace(tzinfo=None) - delta
    parsed, has_time = _parse_time(text)
    if parsed is None:
        raise UsageError(f"{name}: {text!r} is not a date; use YYYY-MM-DD, YYYY-MM-DDTHH:MM or e.g. 7d")
    if not has_time and end_of_day:
        return parsed + timedelta(days=1)
    return parsed


def _parse_time(text: str) -> tuple[datetime | None, bool]:
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return datetime.fromisoformat(text), False
        parsed = datetime.fromisoformat(text.replace(" ", "T", 1) if " " in text else text)
    except ValueError:
        return None, False
    if parsed.tzinfo:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed, True


# --- the --where language -----------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<squote>'(?:[^']|'')*')
  | (?P<dquote>"(?:[^"]|"")*")
  | (?P<op><=|>=|!=|<>|==|=|<|>)
  | (?P<punct>[(),])
  | (?P<word>[^\s'"()=<>!,]+)
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Tok:
    kind: str  # "str" (quoted), "word", "op", "punct"
    text: str
    pos: int


def tokenize(expr: str) -> list[_Tok]:
    """Split a ``--where`` expression into tokens; quoted strings come back unquoted."""
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            if expr[pos] in "'\"":
                raise UsageError(f"--where: unterminated quote at character {pos + 1} of {expr!r}")
            raise UsageError(f"--where: unexpected {expr[pos]!r} at character {pos + 1} of {expr!r}")
        kind = m.lastgroup
        assert kind is not None  # every alternative of _TOKEN is a named group
        text = m.group()
        if kind == "squote":
            out.append(_Tok("str", text[1:-1].replace("''", "'"), pos))
        elif kind == "dquote":
            out.append(_Tok("str", text[1:-1].replace('""', '"'), pos))
        elif kind != "space":
            out.append(_Tok(kind, text, pos))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, expr: str):
        self.expr = expr
        self.toks = tokenize(expr)
        self.i = 0

    def error(self, message: str) -> UsageError:
        return UsageError(f"--where {self.expr!r}: {message}")

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, what: str) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.error(f"expected {what} at the end")
        self.i += 1
        return tok

    def keyword(self, *words: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.kind == "word" and tok.text.lower() in words:
            self.i += 1
            return True
        return False

    def parse(self) -> Filter:
        if not self.toks:
            raise self.error("the expression is empty")
        result = self.condition()
        while self.peek() is not None:
            if self.keyword("or"):
                raise self.error("OR is not supported: use column IN (a, b) or give separate searches")
            if not self.keyword("and"):
                tok = self.peek()
                assert tok is not None  # the loop's condition
                raise self.error(f"expected AND before {tok.text!r} (character {tok.pos + 1})")
            result = result & self.condition()
        return result

    def value(self) -> str:
        tok = self.take("a value")
        if tok.kind == "str":
            return tok.text
        if tok.kind == "word" and tok.text.lower() not in _KEYWORDS:
            return tok.text
        raise self.error(f"expected a value at character {tok.pos + 1}, got {tok.text!r}")

    def column(self) -> tuple[str, str, str, tuple]:
        """(display name, SQL expression, value type, parameters of the expression)."""
        tok = self.take("a column")
        if tok.kind != "word" or tok.text.lower() in _KEYWORDS:
            raise self.error(f"expected a column name at character {tok.pos + 1}, got {tok.text!r}")
        name = tok.text.lower()
        if name.startswith("metadata."):
            key = tok.text[len("metadata.") :]
            if not _METADATA_KEY.match(key):
                raise self.error(f"metadata key {key!r} may hold only letters, digits, _ and -")
            return tok.text, "json_extract_string(d.metadata, ?)", "meta", (f'$."{key}"',)
        name = ALIASES.get(name, name)
        if name not in COLUMNS:
            known = ", ".join(sorted([*COLUMNS, *ALIASES, "metadata.<key>"]))
            raise self.error(f"unknown column {tok.text!r}; known columns: {known}")
        expr, kind = COLUMNS[name]
        return name, expr, kind, ()

    def condition(self) -> Filter:
        name, expr, kind, head = self.column()
        negate = self.keyword("not")
        tok = self.peek()
        if tok is not None and tok.kind == "word" and tok.text.lower() in ("in", "like", "ilike", "glob", "is"):
            self.i += 1
            word = tok.text.lower()
            if word == "is":
                if negate:
                    raise self.error("write IS NOT NULL, not NOT IS NULL")
                is_not = self.keyword("not")
                if not self.keyword("null"):
                    raise self.error("expected NULL after IS")
                sql = f"{expr} IS {'NOT ' if is_not else ''}NULL"
                return Filter(((sql, head),), (f"{name} IS {'NOT ' if is_not else ''}NULL",))
            if word == "in":
                values = self.in_list()
                if kind == "page":
                    raise self.error("page takes = != < <= > >=, not IN")
                bound = tuple(_convert(name, kind, v, self) for v in values)
                marks = ", ".join("?" for _ in bound)
                sql = f"{expr} {'NOT ' if negate else ''}IN ({marks})"
                return Filter(((sql, head + bound),), (f"{name} {'NOT ' if negate else ''}IN {values}",))
            pattern = self.value()
            if kind in ("int", "num", "time", "page"):
                raise self.error(f"{word.upper()} needs a text column; {name} is not one")
            op = word.upper()
            sql = f"{expr} {'NOT ' if negate else ''}{op} ?"
            return Filter(((sql, head + (pattern,)),), (f"{name} {'NOT ' if negate else ''}{op} {pattern!r}",))
        if negate:
            raise self.error("NOT must be followed by IN, LIKE, ILIKE or GLOB")
        tok = self.take("an operator")
        if tok.kind != "op":
            raise self.error(f"expected an operator (= != < <= > >= IN LIKE GLOB IS) after {name}, got {tok.text!r}")
        op = _COMPARE[tok.text]
        raw = self.value()
        return _compare(name, expr, kind, head, op, raw, self)

    def in_list(self) -> list[str]:
        tok = self.take("(")
        if tok.text != "(":
            raise self.error(f"expected ( after IN, got {tok.text!r}")
        values = [self.value()]
        while True:
            tok = self.take(")")
            if tok.text == ")":
                return values
            if tok.text != ",":
                raise self.error(f"expected , or ) in the IN list, got {tok.text!r}")
            values.append(self.value())


def _compare(name, expr, kind, head, op, raw, parser) -> Filter:
    shown = f"{name} {op} {raw!r}"
    if kind == "meta":
        if op in ("<", "<=", ">", ">=") and _is_number(raw):
            return Filter(((f"TRY_CAST({expr} AS DOUBLE) {op} ?", head + (float(raw),)),), (shown,))
        return Filter(((f"{expr} {op} ?", head + (raw,)),), (shown,))
    if kind == "page":
        page = _convert(name, "int", raw, parser)
        spans = {
            "=": ("c.page_start <= ? AND c.page_end >= ?", (page, page)),
            "!=": ("NOT (c.page_start <= ? AND c.page_end >= ?)", (page, page)),
            "<": ("c.page_start < ?", (page,)),
            "<=": ("c.page_start <= ?", (page,)),
            ">": ("c.page_end > ?", (page,)),
            ">=": ("c.page_end >= ?", (page,)),
        }
        return Filter((spans[op],), (shown,))
    if kind == "time":
        moment, has_time = _parse_time(raw.strip())
        if moment is None:
            raise parser.error(f"{raw!r} is not a date for {name}; use YYYY-MM-DD or YYYY-MM-DDTHH:MM")
        if not has_time:  # a day: = and != mean the whole day, < <= > >= its bounds
            nxt = moment + timedelta(days=1)
            bounds = {
                "=": (f"{expr} >= ? AND {expr} < ?", (moment, nxt)),
                "!=": (f"NOT ({expr} >= ? AND {expr} < ?)", (moment, nxt)),
                "<": (f"{expr} < ?", (moment,)),
                "<=": (f"{expr} < ?", (nxt,)),
                ">": (f"{expr} >= ?", (nxt,)),
                ">=": (f"{expr} >= ?", (moment,)),
            }
            return Filter((bounds[op],), (shown,))
        return Filter(((f"{expr} {op} ?", (moment,)),), (shown,))
    return Filter(((f"{expr} {op} ?", head + (_convert(name, kind, raw, parser),)),), (shown,))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _convert(name: str, kind: str, raw: str, parser: _Parser | None = None):
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            message = f"{name} takes a whole number, got {raw!r}"
            raise (parser.error(message) if parser else UsageError(message)) from None
    if kind == "num":
        try:
            return float(raw)
        except ValueError:
            message = f"{name} takes a number, got {raw!r}"
            raise (parser.error(message) if parser else UsageError(message)) from None
    if kind == "type":
        return _file_type(raw)
    if kind == "time":
        moment, _ = _parse_time(str(raw).strip())
        if moment is None:
            message = f"{raw!r} is not a date for {name}"
            raise parser.error(message) if parser else UsageError(message)
        return moment
    return str(raw)


def parse_where(expr: str) -> Filter:
    """Parse one ``--where`` expression; :class:`~quarry.core.errors.UsageError` if it is not valid."""
    return _Parser(expr).parse()
