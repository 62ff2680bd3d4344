"""``quarry corpus report``: the picture a team looks at before publishing a corpus built from a
store — duplicates by folder and the bytes they hold, languages, personal data by kind,
boilerplate per root — read from the committed catalog's signal columns (docs/corpus.md)."""

from __future__ import annotations

from quarry.core.sqlfiles import load_sql
from quarry.retrieval.corpus.boilerplate import MIN_DOCS as BOILERPLATE_MIN_DOCS
from quarry.retrieval.corpus.boilerplate import SHARE as BOILERPLATE_SHARE

__all__ = ["BOILERPLATE_MIN_DOCS", "BOILERPLATE_SHARE", "report"]


def _records(con, name: str, params=None) -> list[dict]:
    cur = con.execute(load_sql(name), params or [])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def report(con, min_docs: int = BOILERPLATE_MIN_DOCS, share: float = BOILERPLATE_SHARE) -> dict:
    """The corpus report of the catalog ``con`` as plain data."""
    totals = _records(con, "corpus_totals")[0]
    return {
        **{k: int(v or 0) for k, v in totals.items()},
        "duplicates": [{**r, "bytes_saved": int(r["bytes_saved"])} for r in _records(con, "corpus_duplicates")],
        "languages": _records(con, "corpus_languages"),
        "pii": [
            {"kind": r["kind"], "total": int(r["total"] or 0), "chunks": int(r["chunks"] or 0)}
            for r in _records(con, "corpus_pii")
        ],
        "boilerplate": [
            {**r, "line_share": round(float(r["line_share"]), 4)}
            for r in _records(con, _boilerplate_sql(con), [min_docs, share])
        ],
    }


def _boilerplate_sql(con) -> str:
    """The boilerplate query: from ``chunks.boilerplate``, or from the lines for a catalog
    committed before that column."""
    columns = {r[0] for r in con.execute("DESCRIBE chunks").fetchall()}
    return "corpus_boilerplate" if "boilerplate" in columns else "corpus_boilerplate_lines"
