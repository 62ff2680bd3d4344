"""Boilerplate flags kept true at each commit (``chunks.boilerplate``), and with
``QUARRY_BOILERPLATE=strip`` the BM25 text and vectors that leave those lines out.

A line is boilerplate in a root when enough of the root's documents hold it
(quarry/retrieval/corpus/boilerplate.py). A commit cannot afford to count every line again, so it
counts only the lines it may have flipped: ``L``, the lines of the documents it added, changed,
moved, deleted or whose duplicate assignment changed (deleted ones' lines are taken by the writer
before their rows go). One pass over ``chunks.line_hashes``, semi-joined with ``L``, counts per
root the documents holding each line of ``L``. A line's holders moved by at
most the number ``d`` of changed documents (old or new versions) holding it, and a root's size by
at most the ``k`` documents changed: only lines whose count lies within ``d`` of the threshold,
give or take what ``k`` moves it, can have flipped (``F``). The chunks recomputed are those
of the changed documents and those holding a line of ``F``; their other lines are counted by a
second such scan, and only rows whose value changed are written — into a delta layer as an edit
would (quarry/store/layers.py), or in place in a whole catalog.

What an incremental commit does not see: a line no change touched keeps its status while its
root's document count moves the threshold (``max(3, ceil(2% x n))``) under it. ``quarry maintain``
recomputes every chunk (:func:`update` with ``full``), and so does the first commit of a store
and of a catalog from before the column (meta ``boilerplate_flags`` not set).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from quarry.core.models import text_hash
from quarry.core.sqlfiles import load_sql, statements
from quarry.retrieval.corpus import boilerplate as rules

if TYPE_CHECKING:
    from quarry.store.catalog import WritingCatalog

__all__ = ["MARK", "Update", "update", "mode", "stale"]

# meta key: the QUARRY_BOILERPLATE mode every chunk's flag and texts were computed for once (then
# commits keep them); another mode, or none, makes the next commit compute every chunk's
MARK = "boilerplate_flags"


def mode() -> str:
    """``QUARRY_BOILERPLATE``: keep or strip."""
    return "strip" if rules.stripping() else "keep"


def stale(con) -> bool:
    """Whether the catalog ``con`` reads needs every chunk's flag computed again: another mode's
    flags, or a line whose status the growth of its root moved (``quarry maintain``)."""
    from quarry.store.catalog import get_meta

    if get_meta(con).get(MARK) != mode():
        return True
    con.execute(load_sql("boilerplate_all"), [rules.MIN_DOCS, rules.SHARE, False])
    try:
        return con.execute(load_sql("boilerplate_all_count")).fetchone()[0] > 0
    finally:
        for stmt in statements("boilerplate_drop"):
            con.execute(stmt)


_ROWS = "boilerplate_rows"
_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("doc_id", pa.string()),
        ("boilerplate", pa.float64()),
        ("search_text", pa.string()),
        ("text_hash", pa.string()),
    ]
)


@dataclass
class Update:
    """What :func:`update` changed: documents whose chunks rows changed, those a delta layer
    copied from an earlier one, and the vectors of chunks whose embedded text changed (stripping)."""

    changed: list[str] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)
    vectors: pa.Table | None = None  # chunk_id, text_hash, vector: the LanceDB rows to update
    by_chunk: dict[str, np.ndarray] = field(default_factory=dict)  # the same vectors by chunk_id
    flagged: int = 0
    updated: int = 0  # rows computed in Python and written (flag-only changes of a full recount stay in SQL)
    rows: pa.Table | None = None  # those rows
    complete: bool = True  # every chunk's texts are as the mode wants (False: no vector for some stripped text)


def _status(con, lines: set[int]) -> dict[tuple[str, int], int]:
    if not lines:
        return {}
    return {(r, h): n for r, h, n in con.execute(load_sql("boilerplate_counts"), [sorted(lines)]).fetchall()}


def _maybe_flipped(moved: dict[int, int], counts: dict, roots: dict[str, int], k: int) -> set[int]:
    """Lines whose status in some root may differ from before this commit: ``moved`` gives, per
    line, how many of the changed documents (before or after) hold it — its holders moved by at
    most that much — and ``k`` bounds how far each root's document count moved."""
    out = set()
    for root, n in roots.items():
        low, high = rules.threshold(max(0, n - k)), rules.threshold(n + k)
        for h, d in moved.items():
            c = counts.get((root, h), 0)
            if c == 0:
                continue  # no document of the root holds it now: no chunk there to update
            if rules.is_boilerplate(c, n):
                if c - d < high:
                    out.add(h)
            elif c + d >= low:
                out.add(h)
    return out


def update(
    cat: WritingCatalog,
    docs: set[str],
    removed_lines: dict[int, int],
    removed_docs: int,
    strip: bool = False,
    lookup: Callable | None = None,
    embed: Callable | None = None,
    full: bool = False,
    restore: bool = False,
) -> Update:
    """Bring ``chunks.boilerplate`` of the catalog ``cat`` writes (quarry/store/catalog_writes.py)
    in line after a commit's changes.

    ``docs``: documents added, changed or moved, or whose duplicate assignment changed;
    ``removed_lines``/``removed_docs``: the lines of the documents deleted or replaced (line ->
    how many of them held it) and their number;
    with ``strip``, chunks' BM25 text and text hash leave their boilerplate lines out; their new
    vectors come from ``lookup(hashes)`` (the vector cache) or ``embed(texts)``; without either a
    chunk keeps its texts; ``restore``: without ``strip``, give stripped chunks their whole texts
    back (the catalog was stripped before). ``full``: every chunk from scratch (``quarry
    maintain``, a first commit)."""
    con, texts = cat.con, strip or restore
    for stmt in statements("boilerplate_wanted"):
        con.execute(stmt)
    try:
        if full:
            con.execute(load_sql("boilerplate_all"), [rules.MIN_DOCS, rules.SHARE, texts])
            con.execute(load_sql("boilerplate_all_flags"), [texts])  # flag-only changes: no row leaves DuckDB
            rows = con.execute(load_sql("boilerplate_all_rows")).fetchall() if texts else []
        else:
            rows = _changed_rows(con, docs, removed_lines, len(docs) + removed_docs)
        out = _compute(rows, strip, restore, lookup, embed)
        if out.rows is not None:
            con.register(_ROWS, out.rows)
            try:
                con.execute(load_sql("boilerplate_add"))
            finally:
                con.unregister(_ROWS)
        out.copied = cat.own_chunks("boilerplate_copied", "boilerplate_copy")
        out.changed = _apply(con, cat.statements_name("boilerplate_apply"))
    finally:
        for stmt in statements("boilerplate_drop"):
            con.execute(stmt)
    logging.getLogger("quarry").info(
        "boilerplate: %d chunks recomputed in Python, %d rows updated in %d documents, %d re-embedded (%s)",
        len(rows),
        out.updated,
        len(out.changed),
        0 if out.vectors is None else out.vectors.num_rows,
        "all" if full else "incremental",
    )
    return out


def _apply(con, name: str) -> list[str]:
    """Run ``sql/<name>.sql`` (texts, then flags); the documents whose chunks it changed."""
    for stmt in statements(name):
        con.execute(stmt)
    return [d for (d,) in con.execute(load_sql("boilerplate_wanted_docs")).fetchall()]


def _compute(rows: list[tuple], strip: bool, restore: bool, lookup, embed) -> Update:
    """New shares and texts of ``rows`` (chunk_id, doc_id, share, boilerplate lines, header, text,
    search_text, text_hash, stored share): the rows to write and the vectors of changed texts."""
    out = Update(flagged=len(rows))
    wanted = []
    restrip: dict[str, tuple[str, str]] = {}  # chunk_id -> (new text hash, embedded text)
    for chunk_id, doc_id, share, boiler, header, text, search, thash, stored in rows:
        new_search, new_hash = search, thash
        if text is not None and (strip or (restore and (share or stored))):  # texts read where they may change
            lines = set(boiler or ()) if strip else set()
            new_search = rules.search_text(header, text, lines)
            embedded = rules.embed_text(header, text, lines)
            new_hash = text_hash(embedded)
            if new_hash != thash:
                restrip[chunk_id] = (new_hash, embedded)
        if share != stored or new_search != search or new_hash != thash:
            wanted.append((chunk_id, doc_id, share, new_search, new_hash, search, thash))
    vecs = _vectors(restrip, lookup, embed)
    rows_out = []
    for chunk_id, doc_id, share, new_search, new_hash, search, thash in wanted:
        if new_hash != thash and new_hash not in vecs:  # no vector for the stripped text: texts stay
            new_search, new_hash = search, thash
            out.complete = False
            if share == stored:
                continue
        rows_out.append(
            {
                "chunk_id": chunk_id,
                "doc_id": doc_id,
                "boilerplate": share,
                "search_text": new_search,
                "text_hash": new_hash,
            }
        )
    out.updated = len(rows_out)
    if rows_out:
        out.rows = pa.Table.from_pylist(rows_out, schema=_SCHEMA)
    ids = [r["chunk_id"] for r in rows_out if r["chunk_id"] in restrip and r["text_hash"] == restrip[r["chunk_id"]][0]]
    if ids:
        out.by_chunk = {c: vecs[restrip[c][0]] for c in ids}
        dim = len(next(iter(vecs.values())))
        out.vectors = pa.table(
            {
                "chunk_id": pa.array(ids, pa.string()),
                "text_hash": pa.array([restrip[c][0] for c in ids], pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(np.stack([out.by_chunk[c] for c in ids]).astype(np.float32).ravel()), dim
                ),
            }
        )
    return out


def _changed_rows(con, docs: set[str], removed_lines: dict[int, int], k: int) -> list[tuple]:
    """The chunks an incremental commit recomputes, with their new share and boilerplate lines."""
    ids = sorted(docs)
    moved = collections.Counter(removed_lines)
    if ids:
        moved.update(dict(con.execute(load_sql("boilerplate_lines"), [ids]).fetchall()))
    lines = set(moved)
    if not lines:
        return []
    roots = dict(con.execute(load_sql("boilerplate_roots")).fetchall())
    counts = _status(con, lines)
    flipped = _maybe_flipped(moved, counts, roots, k)
    found = con.execute(load_sql("boilerplate_chunks"), [ids, sorted(flipped)]).fetchall()
    changed = set(ids)
    rows = [r for r in found if r[1] in changed or any(h in flipped for h in (r[4] or ()))]
    others = {h for r in rows for h in (r[4] or ())} - lines
    counts.update(_status(con, others))
    out = []
    for chunk_id, doc_id, root, norm_hash, line_hashes, stored, header, text, search, thash in rows:
        n = roots.get(root, 0)
        boiler = [h for h in (line_hashes or ()) if rules.is_boilerplate(counts.get((root, h), 0), n)]
        share = None if norm_hash is None else rules.share(line_hashes, set(boiler))
        out.append((chunk_id, doc_id, share, boiler, header, text, search, thash, stored))
    return out


def _vectors(restrip: dict[str, tuple[str, str]], lookup, embed) -> dict[str, np.ndarray]:
    """Vectors of the stripped texts: stored ones by text hash first, the rest embedded."""
    if not restrip:
        return {}
    texts = dict(restrip.values())
    found = dict(lookup(sorted(texts))) if lookup is not None else {}
    missing = [h for h in texts if h not in found]
    if missing and embed is not None:
        got = embed([texts[h] for h in missing])
        found.update(zip(missing, np.asarray(got, dtype=np.float32)))
    return found
