"""What a run will do: the discovered files against the committed catalog, through the deletion guard.

Plain functions, shared by the index flow's tasks (``tasks/discover.py``) and ``--dry-run``,
which runs them without Prefect.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from quarry.core import gcpause, paths
from quarry.core.models import FileError, FileInfo
from quarry.core.sqlfiles import load_sql
from quarry.ingest import parsers
from quarry.ingest.discover import RootScan, discover, unsupported_reason
from quarry.ingest.guard import GuardLimits, Verdict, check_deletes, check_roots
from quarry.ingest.plan import CatalogDoc, Plan, make_plan
from quarry.store.pointer import read_pointer
from quarry.store.reader import open_snapshot

__all__ = [
    "Discovery",
    "RunPlan",
    "discover_roots",
    "committed_catalog",
    "known_files",
    "plan_run",
    "UNSUPPORTED_LISTED",
    "RACY_SECONDS",
]

# The run report names at most this many unsupported files (the count is always exact): a tree of
# 100,000 images would otherwise put megabytes into every run row.
UNSUPPORTED_LISTED = 1000
# A file's size and mtime stand for its bytes only when that mtime lies this far before the run
# that hashed it: coarse file-system clocks (2 s on FAT and some shares) cannot hide a later write.
RACY_SECONDS = 2.0


@dataclass
class Discovery:
    """What discovery found under a run's roots."""

    files: list[FileInfo]  # supported, hashed
    unsupported: list[FileInfo]  # not read
    unreadable: list[FileError]  # supported but could not be read, or a folder that could not be listed
    scans: list[RootScan]  # one per root
    # the committed catalog discovery compared sizes and mtimes with, read once for the plan too
    catalog: tuple[list[CatalogDoc], dict[str, str]] | None = None

    def unsupported_files(self) -> list[dict]:
        """``[{"path", "reason"}]`` of the first :data:`UNSUPPORTED_LISTED` unsupported files, by path."""
        items = sorted(self.unsupported, key=lambda f: f.path)[:UNSUPPORTED_LISTED]
        return [{"path": paths.display(f.path), "reason": unsupported_reason(f)} for f in items]


def discover_roots(
    roots: list[str], include: tuple = (), exclude: tuple = (), store: Path | None = None, rehash: bool = False
) -> Discovery:
    """Walk ``roots``; a root that is missing or cannot be listed is recorded, never raised.
    With ``store``, its committed catalog is read once: files it knows are not read again while
    their size and mtime match (:func:`known_files`; not with ``rehash``), and the plan reuses it."""
    errors: list[FileError] = []
    scans: list[RootScan] = []
    with gcpause.paused():  # a record per file, no cycles: quarry/core/gcpause.py
        catalog = committed_catalog(store) if store is not None else None
        known = known_files(catalog[0]) if catalog and not rehash else None
        files, unsupported = discover(roots, include, exclude, errors=errors, scans=scans, known=known)
    return Discovery(files, unsupported, errors, scans, catalog)


def known_files(docs: list[CatalogDoc]) -> dict[str, tuple[int, float, str, float]]:
    """``{path: (size, mtime, sha256, trust_before)}`` of the committed documents whose size and
    mtime may stand for their bytes (rsync's quick check, git's index): discovery hashes such a
    file again only when its size or mtime differs, or when its ctime is not before
    ``trust_before``. ``trusted`` rows only (``sql/plan_documents.sql``): a row's mtime must lie
    :data:`RACY_SECONDS` before the start of the run that wrote it (git's "racy" rule: a write
    within the clock tick of the hash would leave the mtime unchanged), and so must the file's
    ctime, which no tool sets back (a rename over the file, a copy that restores its mtime)."""
    return {d.path: (d.size, d.mtime, d.sha256, d.trust_before) for d in docs if d.trusted}


def committed_catalog(store: Path) -> tuple[list[CatalogDoc], dict[str, str]]:
    """The committed documents and meta of a store (empty for a new store)."""
    if read_pointer(store) is None:
        return [], {}
    snap = open_snapshot(store, search_index=False)
    try:
        columns = {r[0] for r in snap.con.execute("DESCRIBE documents").fetchall()}
        sql = load_sql("plan_documents")
        if "path_bytes" not in columns:  # a catalog committed before the column existed
            sql = sql.replace("d.path_bytes,", "NULL AS path_bytes,")
        # through Arrow, column by column: a third of fetchall's time at 50,000 documents
        table = snap.con.execute(sql, [RACY_SECONDS]).fetch_arrow_table()
        rows = zip(*(column.to_pylist() for column in table.columns))
        meta = dict(snap.con.execute(load_sql("get_meta")).fetchall())
    finally:
        snap.close()
    docs = [
        CatalogDoc(
            r[0],
            r[1] if r[6] is None else paths.from_catalog(r[1], r[6]),
            r[3],
            r[4] / 1e6,
            r[5],
            bool(r[7]),
            r[8] / 1e6 if r[8] is not None else 0.0,
        )
        for r in rows
    ]
    return docs, meta


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
    store: Path,
    discovery: Discovery,
    *,
    full: bool,
    fingerprint: str,
    model: str,
    dim: int,
    limits: GuardLimits,
    patterns: tuple[str, ...] = (),
) -> RunPlan:
    """Diff the discovered files against the committed catalog and judge the result.

    Documents under a root the guard fails (missing, unreadable, empty) are out of the plan's
    scope, so they are kept; a plan that would delete too much gets the guard's refusals.
    ``dim`` 0 (a hosted model of unknown size) skips the model comparison.
    """
    docs, meta = discovery.catalog if discovery.catalog is not None else committed_catalog(store)
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
