"""Duplicate clusters kept up to date at each commit (``documents.dup_cluster``, ``dup_of``,
``dup_similarity``).

The near-duplicate index is the catalog itself: every documents row carries its MinHash signature
and LSH band keys (``minhash``, ``lsh_bands``), computed by the run that parsed it. A commit finds
candidate pairs with one query over the band keys (documents sharing a key, or the same normalised
text: ``sql/dedup_candidates.sql``), verifies them against their signatures, clusters them
(quarry/retrieval/corpus/clusters.py) and rewrites the rows whose assignment changed — a new copy,
a deleted or edited canonical member, a copy edited beyond the threshold — into its own layer, as
a permission change does. No file is read again and no chunk or vector changes; because the index
is columns of ``documents``, it is written, merged, rolled back and uploaded with them, and a
crash before the commit's rename leaves it as it was.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from quarry.core.environment import environment
from quarry.core.sqlfiles import load_sql
from quarry.retrieval.corpus.clusters import Assignment, Member, clusters
from quarry.retrieval.corpus.minhash import from_blob

if TYPE_CHECKING:
    from quarry.store.catalog import WritingCatalog

__all__ = ["update_clusters", "threshold"]

_WANTED = "wanted_dups"
_SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("dup_cluster", pa.string()), ("dup_of", pa.string()), ("dup_similarity", pa.float64())]
)


def threshold() -> float:
    """``QUARRY_DUP_THRESHOLD`` (0.8)."""
    return environment().dup_threshold


def update_clusters(cat: WritingCatalog, at: float | None = None) -> list[str]:
    """Recompute the duplicate clusters of the catalog ``cat`` writes
    (quarry/store/catalog_writes.py) and store the assignments that changed; returns the doc_ids
    whose rows changed."""
    at = threshold() if at is None else at
    con = cat.con
    pairs = con.execute(load_sql("dedup_candidates")).fetchall()
    ids = sorted({d for pair in pairs for d in pair})
    members, stored = {}, {}
    for doc_id, path, mtime, chash, blob, cluster, of, sim in con.execute(load_sql("dedup_members"), [ids]).fetchall():
        stored[doc_id] = Assignment(cluster, of, sim)
        sig = from_blob(blob)
        if sig is not None:
            members[doc_id] = Member(doc_id, path, mtime, chash, sig)
    wanted = clusters(members, pairs, at)
    changes = [(d, wanted.get(d, Assignment())) for d in stored if wanted.get(d, Assignment()) != stored[d]]
    if not changes:
        return []
    table = pa.Table.from_pylist(
        [{"doc_id": d, "dup_cluster": a.cluster, "dup_of": a.of, "dup_similarity": a.similarity} for d, a in changes],
        schema=_SCHEMA,
    )
    con.register(_WANTED, table)
    try:
        changed = cat.update_documents("dedup_apply")
    finally:
        con.unregister(_WANTED)
    logging.getLogger("quarry").info(
        "duplicates: %d candidate pairs, %d documents in clusters, %d rows updated",
        len(pairs),
        len(wanted),
        len(changed),
    )
    return changed
