"""Views of a store a reader shows as they are: its runs (the catalog's and the journal's) and a
summary of its search index files. ``Index.runs`` and ``Index.status`` (``quarry runs``,
``quarry status``) return them."""

from __future__ import annotations

import json
from pathlib import Path

from quarry.core.models import RunReport
from quarry.core.sqlfiles import load_sql
from quarry.store import journal
from quarry.store.handle import Store

__all__ = ["runs", "index_summary"]


def runs(con, store: Store | Path, limit: int = 50) -> list[dict]:
    """Index runs, newest first, from the catalog ``con`` and the run journal of ``store`` (the
    runs the next commit has yet to move into the catalog), as ``quarry runs --json`` prints them."""
    cur = con.execute(load_sql("list_runs"), [limit])
    cols = [d[0] for d in cur.description]
    out = [run_row(dict(zip(cols, row))) for row in cur.fetchall()]
    known = {item["run_id"] for item in out}
    out += [row for row in journal.pending(store) if row.get("run_id") not in known]
    out.sort(key=lambda item: (item.get("started") or "", item.get("run_id") or ""), reverse=True)
    return out[:limit]


def run(con, store: Store | Path, run_id: str) -> dict | None:
    """One index run by id as :func:`runs` lists it (a run the next commit has yet to record
    included); None when there is none."""
    cur = con.execute(load_sql("run_view"), [str(run_id)])
    row = cur.fetchone()
    if row is not None:
        return run_row(dict(zip([d[0] for d in cur.description], row)))
    for item in journal.pending(store):
        if item.get("run_id") == run_id:
            return item
    return None


def run_row(item: dict) -> dict:
    """A ``runs`` row as plain data: its JSON columns parsed, times as ISO text (UTC, ``Z``)."""
    for key in RunReport.json_fields():
        if isinstance(item.get(key), str):
            item[key] = json.loads(item[key])
    for key in ("started", "finished"):
        item[key] = item[key].isoformat() + "Z" if item.get(key) else None
    return item


def index_summary(manifest: dict) -> dict:
    """The search index in ``quarry status``: live rows, segments (oldest first: generation and
    rows), rows deleted from them, and this generation's own segment (terms, IVF lists, build time)."""
    dense = manifest.get("dense") or {}
    segments = manifest.get("segments") or [{"generation": manifest.get("generation"), "rows": manifest.get("rows")}]
    return {
        "rows": manifest.get("rows"),
        "segments": [{"generation": s.get("generation"), "rows": s.get("rows")} for s in segments],
        "deleted_rows": (manifest.get("deleted") or {}).get("rows", 0),
        "terms": (manifest.get("bm25") or {}).get("terms"),
        "ivf_lists": (dense.get("ivf") or {}).get("nlist"),
        "build_seconds": manifest.get("build_seconds"),
    }
