"""Planning: compare discovered files with the committed catalog.

Identity is by content: a file whose bytes are unchanged is unchanged whatever its mtime, and
a file whose bytes reappear under a new path (the old path gone) is a move, not a delete plus
an add. Deletions are scoped to the roots being indexed.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from quarry.core.models import FileInfo
from quarry.core.paths import ARCHIVE_SEP


class CatalogDoc(NamedTuple):
    """A committed document as the planner sees it (a tuple: a million are built per run)."""

    doc_id: str
    path: str
    sha256: str
    mtime: float
    size: int = -1
    trusted: bool = False  # size and mtime may stand for the bytes (quarry/store/planning.py, known_files)
    trust_before: float = 0.0  # a file's ctime must precede this (epoch seconds) for its stat to vouch


@dataclass
class Plan:
    """What a run has to do. Each file appears in exactly one list."""

    new: list[tuple[FileInfo, str]] = field(default_factory=list)  # (file, new doc id)
    changed: list[tuple[FileInfo, str]] = field(default_factory=list)  # (file, existing doc id)
    moved: list[tuple[FileInfo, str, str]] = field(default_factory=list)  # (file, doc id, old path)
    removed: list[CatalogDoc] = field(default_factory=list)
    unchanged: list[tuple[FileInfo, str]] = field(default_factory=list)
    touched: list[tuple[FileInfo, str]] = field(default_factory=list)  # unchanged, but a new mtime

    @property
    def to_process(self) -> list[tuple[FileInfo, str]]:
        return self.new + self.changed

    def counts(self) -> dict[str, int]:
        return {
            "new": len(self.new),
            "changed": len(self.changed),
            "moved": len(self.moved),
            "removed": len(self.removed),
            "unchanged": len(self.unchanged),
        }


def new_doc_id(file: FileInfo, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """A document id for a file seen for the first time: stable for the same path and bytes.

    The path is hashed as the bytes of its name (``os.fsencode``), which for a valid UTF-8 name
    are its UTF-8 bytes as before, and for a name that is not (a Latin-1 ``caf\\xe9.md``) do
    not raise on the surrogates Python decodes such names to.

    ``taken``: ids already in use. A document keeps its id through edits and moves, so a file
    back at its first path with its first bytes (an old version restored, the edited copy moved
    away) hashes to the id that document still carries; the id is then salted (``\0`` and a
    counter), still the same for the same catalog, so a re-run after a crash picks the same one.
    """
    base = os.fsencode(file.path) + b"\0" + file.sha256.encode()
    doc_id, salt = hashlib.sha256(base).hexdigest()[:20], 0
    while doc_id in taken:
        salt += 1
        doc_id = hashlib.sha256(base + b"\0" + str(salt).encode()).hexdigest()[:20]
    return doc_id


def scope_test(roots: list[str]):
    """``test(path)``: whether ``path`` lies under one of ``roots`` (a root may itself be a file, or
    an archive whose members are ``<root>!/<member>``). The roots' prefixes are built once: the
    guard asks it of every committed document (50,000 in 0.27 s when built per call, 0.02 s so)."""
    exact = frozenset(roots)
    prefixes = tuple(r.rstrip("/") + "/" for r in roots) + tuple(r + ARCHIVE_SEP for r in roots)
    return lambda path: path in exact or path.startswith(prefixes)


def _containers(path: str) -> list[str]:
    """The archives ``path`` lies in, outermost first: ``a.zip!/b.zip!/c.md`` -> [a.zip, a.zip!/b.zip]."""
    parts = path.split(ARCHIVE_SEP)
    return [ARCHIVE_SEP.join(parts[:i]) for i in range(1, len(parts))]


def make_plan(
    files: list[FileInfo],
    catalog: list[CatalogDoc],
    roots: list[str],
    rebuild: bool = False,
    unreadable: frozenset[str] | set[str] = frozenset(),
    reparse: frozenset[str] | set[str] = frozenset(),
) -> Plan:
    """Sort ``files`` into new / changed / moved / removed / unchanged.

    ``rebuild`` (``--full``, or settings that shape chunks changed) turns every existing
    document into a changed one; vectors are still reused where the embedded text is equal.
    ``unreadable`` paths exist but could not be read this run (a permission error, a file being
    rewritten): their documents are kept as they are, not removed; so are the members of an
    unreadable archive (or of an archive member that could not be opened). ``reparse``: file types
    whose parser changed since the store was cut; their documents are changed ones too.
    """
    plan = Plan()
    by_path = {d.path: d for d in catalog}
    taken = {d.doc_id for d in catalog}  # a new document never takes an id the catalog holds
    seen_paths = {f.path for f in files} | set(unreadable)
    # Documents whose path vanished within scope are candidates for a move target.
    vanished: dict[str, list[CatalogDoc]] = defaultdict(list)
    scoped = scope_test(roots)
    for d in catalog:
        if d.path in seen_paths or not scoped(d.path):
            continue
        if ARCHIVE_SEP in d.path and any(c in unreadable for c in _containers(d.path)):
            continue
        vanished[d.sha256].append(d)

    for f in files:
        old = by_path.get(f.path)
        if old is not None:
            if rebuild or old.sha256 != f.sha256 or f.file_type in reparse:
                plan.changed.append((f, old.doc_id))
            else:
                plan.unchanged.append((f, old.doc_id))
                # a new mtime is recorded; so is an unchanged file the quick check had to read, whose
                # row then names this run, so that its stat vouches for it from the next run on
                if abs(old.mtime - f.mtime) > 2e-6 or f.vouched is False:
                    plan.touched.append((f, old.doc_id))
            continue
        candidates = vanished.get(f.sha256)
        if candidates:
            src = candidates.pop(0)
            if rebuild or f.file_type in reparse:
                plan.changed.append((f, src.doc_id))
            else:
                plan.moved.append((f, src.doc_id, src.path))
        else:
            doc_id = new_doc_id(f, taken)
            taken.add(doc_id)
            plan.new.append((f, doc_id))

    plan.removed = sorted((d for ds in vanished.values() for d in ds), key=lambda d: d.path)
    return plan
