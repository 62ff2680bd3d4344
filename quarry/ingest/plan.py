"""Planning: what a run will do. Discovery under the roots (:func:`discover_roots`), the
discovered files against the committed catalog (:func:`make_plan`), through the deletion guard
(:func:`plan_run`).

Identity is by content: a file whose bytes are unchanged is unchanged whatever its mtime, and
a file whose bytes reappear under a new path (the old path gone) is a move, not a delete plus
an add. Deletions are scoped to the roots being indexed.

Plain functions over plain data: the committed catalog is read by the store
(:func:`quarry.store.reader.committed_catalog`) and handed in, and the index flow's tasks
(``tasks/discover.py``) and ``--dry-run``, which runs without Prefect, call the same code.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass, field, replace

from quarry.core import gcpause, paths
from quarry.core.models import FileError, FileInfo
from quarry.core.paths import ARCHIVE_SEP
from quarry.core.plans import CatalogDoc, Plan, scope_test
from quarry.ingest import parsers
from quarry.ingest.discover import RootScan, discover, unsupported_reason
from quarry.ingest.guard import GuardLimits, Verdict, check_deletes, check_roots

__all__ = [
    "Catalog",
    "Discovery",
    "RunPlan",
    "discover_roots",
    "known_files",
    "make_plan",
    "new_doc_id",
    "plan_run",
    "UNSUPPORTED_LISTED",
]

# The run report names at most this many unsupported files (the count is always exact): a tree of
# 100,000 images would otherwise put megabytes into every run row.
UNSUPPORTED_LISTED = 1000

# The committed catalog as the planner reads it: its documents and its meta (empty for a new store)
Catalog = tuple[list[CatalogDoc], dict[str, str]]


@dataclass
class Discovery:
    """What discovery found under a run's roots."""

    files: list[FileInfo]  # supported, hashed
    unsupported: list[FileInfo]  # not read
    unreadable: list[FileError]  # supported but could not be read, or a folder that could not be listed
    scans: list[RootScan]  # one per root
    # the committed catalog discovery compared sizes and mtimes with, kept for the plan
    catalog: Catalog | None = None

    def unsupported_files(self) -> list[dict]:
        """``[{"path", "reason"}]`` of the first :data:`UNSUPPORTED_LISTED` unsupported files, by path."""
        items = sorted(self.unsupported, key=lambda f: f.path)[:UNSUPPORTED_LISTED]
        return [{"path": paths.display(f.path), "reason": unsupported_reason(f)} for f in items]


def discover_roots(
    roots: list[str],
    include: tuple = (),
    exclude: tuple = (),
    catalog: Catalog | None = None,
    rehash: bool = False,
) -> Discovery:
    """Walk ``roots``; a root that is missing or cannot be listed is recorded, never raised.
    With ``catalog`` (the store's committed catalog, :func:`quarry.store.reader.committed_catalog`),
    files it knows are not read again while their size and mtime match (:func:`known_files`; not
    with ``rehash``), and the plan reuses it."""
    errors: list[FileError] = []
    scans: list[RootScan] = []
    with gcpause.paused():  # a record per file, no cycles: quarry/core/gcpause.py
        known = known_files(catalog[0]) if catalog and not rehash else None
        files, unsupported = discover(roots, include, exclude, errors=errors, scans=scans, known=known)
    return Discovery(files, unsupported, errors, scans, catalog)


def known_files(docs: list[CatalogDoc]) -> dict[str, tuple[int, float, str, float]]:
    """``{path: (size, mtime, sha256, trust_before)}`` of the committed documents whose size and
    mtime may stand for their bytes (rsync's quick check, git's index): discovery hashes such a
    file again only when its size or mtime differs, or when its ctime is not before
    ``trust_before``. ``trusted`` rows only (``sql/plan_documents.sql``): a row's mtime must lie
    :data:`~quarry.core.plans.RACY_SECONDS` before the start of the run that wrote it (git's "racy"
    rule: a write within the clock tick of the hash would leave the mtime unchanged), and so must
    the file's ctime, which no tool sets back (a rename over the file, a copy that restores its mtime)."""
    return {d.path: (d.size, d.mtime, d.sha256, d.trust_before) for d in docs if d.trusted}


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


@dataclass
class RunPlan:
    """The plan of a run, why it rebuilds (if it does), and the guard's verdict."""

    plan: Plan
    rebuild: str = ""
    verdict: Verdict = field(default_factory=Verdict)
    documents: int = 0  # documents in the committed catalog
    reparsed: list[str] = field(default_factory=list)  # file types parsed again: their parser's version changed

    def dry_run_report(self, run_id: str, discovery: Discovery) -> dict:
        """What ``--dry-run`` prints: the counts, every file by what would happen to it, the guard."""
        plan = self.plan
        return {
            "run_id": run_id,
            "dry_run": True,
            "plan": plan.counts(),
            "rebuild": self.rebuild,
            "reparsed_formats": self.reparsed,
            "unsupported": len(discovery.unsupported),
            "unsupported_files": discovery.unsupported_files(),
            "guard": self.verdict.to_dict(),
            "files": {
                "add": [paths.display(f.path) for f, _ in plan.new],
                "update": [paths.display(f.path) for f, _ in plan.changed],
                "move": [(paths.display(old), paths.display(f.path)) for f, _, old in plan.moved],
                "delete": [paths.display(d.path) for d in plan.removed],
            },
        }


def plan_run(
    discovery: Discovery,
    catalog: Catalog,
    *,
    full: bool,
    fingerprint: str,
    model: str,
    dim: int,
    limits: GuardLimits,
    patterns: tuple[str, ...] = (),
) -> RunPlan:
    """Diff the discovered files against the committed catalog (``catalog``: its documents and
    meta, :func:`quarry.store.reader.committed_catalog`) and judge the result.

    Documents under a root the guard fails (missing, unreadable, empty) are out of the plan's
    scope, so they are kept; a plan that would delete too much gets the guard's refusals.
    ``dim`` 0 (a hosted model of unknown size) skips the model comparison.
    """
    docs, meta = catalog
    reason = "--full" if full else ""
    if docs and not reason:
        if meta.get("content_fingerprint") not in (None, fingerprint):
            reason = "chunking settings changed"
        elif meta.get("model") and dim and (meta.get("model"), meta.get("dim")) != (model, str(dim)):
            reason = f"embedding model changed ({meta.get('model')} -> {model})"
    # a parser whose version changed re-cuts its format's documents, and only those
    reparse = parsers.stale_formats(meta.get("format_versions")) if docs and not reason else set()
    verdict = check_roots(discovery.scans, docs, limits, patterns)
    unreadable = frozenset(e.path for e in discovery.unreadable)
    with gcpause.paused():
        plan = make_plan(
            discovery.files, docs, verdict.scope, rebuild=bool(reason), unreadable=unreadable, reparse=reparse
        )
    check_deletes(verdict, plan, docs, limits)
    if limits.allow_deletes:  # what the guard would have said: the override the audit log records
        strict = replace(limits, allow_deletes=False)
        shadow = check_deletes(check_roots(discovery.scans, docs, strict, patterns), plan, docs, strict)
        verdict.overridden = shadow.refusals + [
            f"{paths.display(f.path)}: {f.error}" for f in shadow.failures if f.path in verdict.scope
        ]
    return RunPlan(plan, reason, verdict, len(docs), sorted(reparse))
