"""Stratified sampling of documents (or their sections and chunks) by file type and folder, so that a
large folder cannot fill a question set."""

from __future__ import annotations

import posixpath
import random
from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["stratum", "stratified"]


def stratum(doc: dict) -> tuple[str, str]:
    """The (file type, folder) a document is sampled within."""
    return doc.get("file_type") or "", posixpath.dirname(doc.get("rel_path") or doc.get("path") or "")


def stratified(items: list[T], key: Callable[[T], Hashable], n: int, rng: random.Random) -> list[T]:
    """Up to ``n`` of ``items``: strata (by ``key``) take turns in a random order, each handing out its
    items in a random order, so every stratum gets an equal share until it runs out."""
    groups: dict[Hashable, list[T]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    order = sorted(groups, key=repr)
    rng.shuffle(order)
    queues: list[list[T]] = []
    for name in order:
        group = list(groups[name])
        rng.shuffle(group)
        queues.append(group)
    out: list[T] = []
    while len(out) < n and any(queues):
        for queue in queues:
            if queue and len(out) < n:
                out.append(queue.pop())
    return out
