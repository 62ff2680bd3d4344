"""Runs recorded outside a commit: runs that found the store busy, and runs with nothing to write.

Two kinds of run change nothing in the catalog, and neither should pay for a new catalog
generation (a layer, an index segment, a moved pointer) just to add its ``runs`` row:

- a scheduled run that starts while another run holds the writer lock (a run longer than the
  schedule's interval, or a manual ``quarry index``) must not become a second writer, and must not
  fail every minute either: it stands down (``--if-busy skip``) and is recorded as ``skipped``;
- a run whose plan holds nothing to write (no file added, changed, moved or removed) is recorded
  as it is, so that a scheduled re-index of an unchanged tree costs discovery and nothing else.

Either appends one JSON line to ``<store>/run-journal.jsonl``. The next commit claims the journal
(renames it, so that later runs start a new file), inserts its lines into the ``runs`` table and
deletes the claimed file after the pointer rename. Until then :func:`pending` lets readers list
them beside the committed runs.

Crash safety: a run killed after claiming leaves ``run-journal.claimed-*.jsonl``; the next commit
claims those too. A run killed after the rename but before the delete re-inserts rows already in
the table: :func:`merge` skips run ids the catalog has.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from quarry.core.errors import StoreLocked, UsageError
from quarry.core.models import RunReport
from quarry.core.sqlfiles import load_sql
from quarry.store.handle import Store, as_store
from quarry.store.layout import WriterLock
from quarry.store.remote import JournalObject

JOURNAL = "run-journal.jsonl"
CLAIMED_GLOB = "run-journal.claimed-*.jsonl"


def record(store: Store | Path, row: dict) -> None:
    """Append one run row to the store's journal (safe against a concurrent claim)."""
    opened = as_store(store)
    remote, store = opened.remote, opened.folder  # the folder below
    if remote is not None:  # object storage has no append: one object per run
        remote.journal_record(row)
        return
    store.mkdir(parents=True, exist_ok=True)
    path = store / JOURNAL
    # ASCII escapes: a stray surrogate (a non-UTF-8 name) cannot make the append fail.
    line = (json.dumps(row, default=str) + "\n").encode()
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A commit may have claimed (renamed) the file between our open and our lock: then
            # this descriptor is the claimed file, which the commit may already have read.
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.write(fd, line)
                os.fsync(fd)
                return
        finally:
            os.close(fd)


class Claimed(Protocol):
    """A claimed journal: a local file (a Path) or a remote store's object (a JournalObject)."""

    def unlink(self, missing_ok: bool = ...) -> None: ...


def _read(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return rows
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line torn by a crash mid-append: nothing to recover
            continue
    return rows


def pending(store: Store | Path) -> list[dict]:
    """Journalled runs not yet moved into the catalog's ``runs`` table, oldest first."""
    opened = as_store(store)
    remote, store = opened.remote, opened.folder  # the folder below
    if remote is not None:
        return remote.journal_pending()[0]
    rows = []
    for path in sorted(store.glob(CLAIMED_GLOB)) + [store / JOURNAL]:
        rows += _read(path)
    return rows


def claim(store: Store | Path, generation: int) -> tuple[list[dict[str, Any]], Sequence[Claimed]]:
    """Take the journal for the commit of ``generation``: (rows, files to delete after commit)."""
    opened = as_store(store)
    remote, store = opened.remote, opened.folder  # the folder below
    if remote is not None:  # objects written after this listing stay for the next commit
        rows, keys = remote.journal_pending()
        return rows, [JournalObject(remote, key) for key in keys]
    journal = store / JOURNAL
    if journal.exists():
        target = store / f"run-journal.claimed-{generation:06d}.jsonl"
        os.replace(journal, target)
        # Wait for an append that locked the file before the rename to finish writing.
        fd = os.open(target, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)
    files = sorted(store.glob(CLAIMED_GLOB))
    rows = [row for path in files for row in _read(path)]
    return rows, files


def merge(con, rows: list[dict], insert) -> int:
    """Insert ``rows`` into the runs table through ``insert(con, row)``, skipping known run ids."""
    if not rows:
        return 0
    known = {r[0] for r in con.execute(load_sql("run_ids")).fetchall()}
    n = 0
    for row in rows:
        if row.get("run_id") and row["run_id"] not in known:
            row = dict(row)
            for key in ("started", "finished"):
                if isinstance(row.get(key), str):
                    row[key] = datetime.fromisoformat(row[key].rstrip("Z"))
            insert(con, row)
            known.add(row["run_id"])
            n += 1
    return n


def forget(files: Iterable[Claimed]) -> None:
    """Delete claimed journals once the commit that holds their rows is visible."""
    for path in files:
        path.unlink(missing_ok=True)


def record_run(store: Store | Path, report: RunReport) -> dict:
    """Journal a finished run's ``runs`` row (timestamps as the catalog reports them); returns it."""
    row = report.to_dict()
    record(store, row)
    return row


def hold_or_skip(
    store: Store | Path,
    if_busy: str,
    run_id: str,
    started: datetime,
    roots: list[str],
    settings: dict,
    owner: dict | None = None,
) -> tuple[WriterLock | None, dict | None]:
    """The busy check of every index run, one place: ``(the writer lock, None)``, or — when another
    run holds the store and ``if_busy`` is ``"skip"`` — ``(None, the skipped run's row)``, recorded.
    With ``if_busy="fail"`` a busy store raises :class:`~quarry.core.errors.StoreLocked`.

    ``owner`` (a scheduled flow run's ``deployment`` and ``initial_run``) goes into the lock file. A
    tick of a deployment whose own initial run (the one ``quarry serve`` starts at once) holds the
    store is not recorded: that run is doing the tick's work, and a ``skipped`` row would read as
    an interval shorter than a run. Its row is still returned, with the reason."""
    if if_busy not in ("fail", "skip"):
        raise UsageError(f"if_busy must be 'fail' or 'skip', got {if_busy!r}")
    try:
        return WriterLock(store).acquire(owner), None  # before any model loads: a busy store costs nothing
    except StoreLocked as exc:
        if if_busy == "fail":
            raise
        if covered_by_initial_run(owner, exc.holder):
            reason = f"the initial run of this schedule is indexing the store: {exc}"
            return None, skipped_row(run_id, started, datetime.now(UTC).replace(tzinfo=None), roots, reason, settings)
        return None, record_skip(store, run_id, started, roots, str(exc), settings)


def covered_by_initial_run(owner: dict | None, holder: dict) -> bool:
    """Whether the lock's holder is the initial run of the deployment ``owner``'s run belongs to
    (and ``owner``'s run is a tick, not that initial run itself)."""
    owner = owner or {}
    return bool(
        owner.get("deployment")
        and not owner.get("initial_run")
        and holder.get("deployment") == owner["deployment"]
        and holder.get("initial_run") is True
    )


def record_skip(
    store: Store | Path, run_id: str, started: datetime, roots: list[str], reason: str, settings: dict
) -> dict:
    """Record a run that stood down because ``reason`` (the store was busy); returns its row."""
    row = skipped_row(run_id, started, datetime.now(UTC).replace(tzinfo=None), roots, reason, settings)
    record(store, row)
    return row


def skipped_row(
    run_id: str, started: datetime, finished: datetime, roots: list[str], reason: str, settings: dict
) -> dict:
    """The journal line of a run that stood down: every count zero, the reason in ``errors``."""
    return RunReport.skipped_run(run_id, started, finished, roots, reason, settings).to_dict()
