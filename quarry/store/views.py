"""Views of a store a reader shows as they are: its runs (the catalog's and the journal's) and a
summary of its search index files. ``Index.runs`` and ``Index.status`` (``quarry runs``,
``quarry status``) return them."""

from __future__ import annotations

import json
from pathlib import Path

from quarry.core.models import RunReport
from quarry.core.sqlfiles import load_sql
from quarry.store import journal

__all__ = ["runs", "index_summary"]


def runs(con, store: Path, limit: int = 50) -> list[dict]:
    """Index runs, newest first, from the catalog ``con`` and the run journal of ``store`` (the
    runs the next commit has yet to move into the catalog), as ``quarry runs --json`` prints them."""
    cur = con.execute(load_sql("list_runs"), [limit])
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        item = dict(zip(cols, row))
        for key in RunReport.json_fields():
            if isinstance(item.get(key), str):
                item[key] = json.loads(item[key])
        for key in ("started", "finished"):
            item[key] = item[key].isoformat() + "Z" if item.get(key) else None
        out.append(item)
    known = {item["run_id"] for item in out}
    out += [row for row in journal.pending(store) if row.get("run_id") not in known]
    out.sort(key=lambda item: (item.get("started") or "", item.get("run_id") or ""), reverse=True)
    return out[:limit]


def index_summary(manifest: dict) -> dict:
    """The search index in ``quarry status``: live rows, segments (oldest first: generation and
    rows), rows deleted from them, and this generation's own segment (terms, IVF lists, build time)."""
    dense = manifest.get("dense") or {}
    segments = manifest.get("segments") or [{"generation": manifest.get("generation"), "rows": manifest.get("rows")}]
    return {"rows": manifest.get("rows"), "segments": [{"generation": s.get("generation"), "rows": s.get("rows")}
                                                       for s in segments],
            "deleted_rows": (manifest.get("deleted") or {}).get("rows", 0),
            "terms": (manifest.get("bm25") or {}).get("terms"),
            "ivf_lists": (dense.get("ivf") or {}).get("nlist"), "build_seconds": manifest.get("build_seconds")}
