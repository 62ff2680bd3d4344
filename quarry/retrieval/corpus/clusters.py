"""Duplicate clusters from candidate pairs: which documents are copies of which (pure logic; the
commit reads and writes them, quarry/store/dedup.py).

Two documents are duplicates when their normalised texts are equal (similarity 1.0) or their
MinHash signatures agree on at least ``threshold`` of the permutations; a cluster is a connected
set of such pairs. Its canonical member is the oldest file (``mtime``), then the shortest path,
then the first path: a rule of the members' own columns, so any run reaches the same answer from
the same documents, whatever order they were indexed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from quarry.retrieval.corpus.minhash import similarity

__all__ = ["Member", "Assignment", "clusters"]


@dataclass(frozen=True)
class Member:
    doc_id: str
    path: str
    mtime: object
    content_hash: str | None
    signature: np.ndarray


@dataclass(frozen=True)
class Assignment:
    """A document's ``dup_cluster``, ``dup_of`` and ``dup_similarity`` (all None: no copy)."""

    cluster: str | None = None
    of: str | None = None
    similarity: float | None = None


def _similar(a: Member, b: Member) -> float:
    if a.content_hash is not None and a.content_hash == b.content_hash:
        return 1.0
    return similarity(a.signature, b.signature)


def clusters(members: dict[str, Member], pairs: Iterable[tuple[str, str]], threshold: float) -> dict[str, Assignment]:
    """The assignment of every document in a cluster of two or more, from candidate ``pairs``
    (doc_id, doc_id) of ``members``; documents not in the result are in no cluster."""
    parent = {d: d for d in members}

    def root(d: str) -> str:
        while parent[d] != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    for a, b in pairs:
        if a in members and b in members and _similar(members[a], members[b]) >= threshold:
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[ra] = rb
    groups: dict[str, list[str]] = {}
    for d in members:
        groups.setdefault(root(d), []).append(d)
    out = {}
    for docs in groups.values():
        if len(docs) < 2:
            continue
        canon = min(docs, key=lambda d: (members[d].mtime, len(members[d].path), members[d].path))
        for d in docs:
            if d == canon:
                out[d] = Assignment(cluster=canon)
            else:
                out[d] = Assignment(cluster=canon, of=canon, similarity=round(_similar(members[d], members[canon]), 4))
    return out
