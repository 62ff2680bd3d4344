"""``quarry sql``: read-only SQL over the committed catalog of a store.

The catalog is a DuckDB file per generation (docs/export.md): ``documents``, ``sections``,
``chunks``, ``runs``, ``meta``. A query runs on the read-only connection of the generation the
index reads now (``CURRENT``), so it always sees the latest commit, never a run in progress, and
cannot change the store. The temporary table ``evals`` holds the store's evaluation results
(:mod:`quarry.store.evals`: they live beside the generations, not in one). Two temporary views join what users ask for most: ``chunks_full`` (a
chunk with its document's path, type and title and its section's title) and ``sections_full``.

A query that names ``match_bm25`` or ``fts_main_chunks`` also reads DuckDB's full-text tables of
that generation (quarry/store/fts.py): attached read-only, waited for or built first when they are
not there yet, and found by ``fts_main_chunks.match_bm25(chunk_id, 'query')``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quarry.core.errors import UsageError
from quarry.core.sqlfiles import statements
from quarry.store import evals, fts

__all__ = ["SqlResult", "run_sql", "VIEWS"]

VIEWS = ("chunks_full", "sections_full")


@dataclass
class SqlResult:
    """The columns, their DuckDB types and the rows of a query, and the generation it read."""

    columns: list[str]
    types: list[str]
    rows: list[tuple]
    generation: int

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def run_sql(
    con, query: str, generation: int, limit: int | None = None, store: Path | None = None, full_text: bool = True
) -> SqlResult:
    """Run ``query`` on the read-only catalog connection ``con``; at most ``limit`` rows are fetched.

    ``store``: the store the catalog is of, for queries that use DuckDB's full-text tables (built
    here when missing unless ``full_text`` is False: ``QUARRY_DUCKDB_FTS=0``). A statement that
    would write (the connection is read-only) or that DuckDB cannot run is a :class:`UsageError`
    carrying DuckDB's own message.
    """
    import duckdb

    if not query or not query.strip():
        raise UsageError('no SQL given: quarry sql "SELECT count(*) FROM documents"')
    for stmt in statements("sql_views"):
        con.execute(stmt)
    if store is not None:
        evals.expose(con, store)
    # a query past two seconds (match_bm25 over 100,000 chunks) would draw DuckDB's bar on stdout,
    # into quarry sql --format json's output
    con.execute("SET enable_progress_bar = false")
    search_path = None
    if store is not None and fts.uses_fts(query):
        if not full_text and fts.state(store, generation) != "ready":
            raise UsageError(
                "DuckDB's full-text tables are off (QUARRY_DUCKDB_FTS=0): unset it, or set it to 1, to query match_bm25"
            )
        search_path = fts.attach(con, store, generation)
    try:
        if search_path is not None:
            con.execute("SET search_path = ?", [search_path])
        cur = con.execute(query)
        if cur.description is None:
            return SqlResult([], [], [], generation)
        columns = [d[0] for d in cur.description]
        types = [str(d[1]) for d in cur.description]
        rows = cur.fetchall() if limit is None else cur.fetchmany(limit)
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = " (the catalog is read-only: quarry sql only reads)" if "read-only" in first.lower() else ""
        raise UsageError(f"SQL: {first}{hint}") from None
    finally:
        if search_path is not None:
            con.execute("RESET search_path")
    return SqlResult(columns, types, rows, generation)
