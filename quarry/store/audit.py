"""The audit log: an append-only, hash-chained record of a store's security- and data-relevant events.

Every event is one entry, written once and never rewritten: ``audit/<seq>.json`` in the store
folder (created with a hard link from a finished temporary file, so a reader never sees half an
entry and two writers cannot take the same number), or the object of that name next to ``CURRENT``
for a store on object storage (a create-only conditional put). An entry holds its number, the
time, the event, who and from where (host, pid, user, the API key's name), what happened (counts,
never document text or a secret) and ``prev``, the hash of the entry before it; its own ``hash``
covers all of that. :meth:`AuditLog.verify` walks the chain: an edited entry no longer matches its
hash, a removed one leaves a gap, reordered ones break the ``prev`` links. (A chain cannot tell
that its newest entries were cut off; keep a copy of the last hash elsewhere for that.)

Events (``event``): ``key.created``, ``key.revoked``, ``key.expired``, ``access.denied``,
``run.permissions_changed``, ``run.documents_deleted``, ``guard.refused``, ``guard.override``,
``rollback``, ``maintain``. Recording never fails the operation it records: a store that cannot
take an entry logs a warning.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from quarry.core.errors import QuarryError, UsageError
from quarry.store.handle import Store, as_store

__all__ = ["AuditLog", "EVENTS", "Verification", "audit_of", "parse_since", "record"]

FOLDER = "audit"
GENESIS = "0" * 64
EVENTS = (
    "key.created",
    "key.revoked",
    "key.expired",
    "access.denied",
    "run.permissions_changed",
    "run.documents_deleted",
    "guard.refused",
    "guard.override",
    "rollback",
    "maintain",
)
_NAME = re.compile(r"^(\d{12})\.json$")


def _seq(name: str) -> int:
    """The number of an entry, from its file name (one that ``names()`` listed: :data:`_NAME`'s)."""
    m = _NAME.match(name)
    assert m is not None
    return int(m.group(1))


log = logging.getLogger("quarry.audit")


class _Taken(Exception):
    """Another writer took this entry's number first."""


def _digest(entry: dict) -> str:
    """The hash of an entry: SHA-256 of its canonical JSON without the ``hash`` field."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _name(seq: int) -> str:
    return f"{seq:012d}.json"


class _Folder:
    """Entries as files of a local folder."""

    def __init__(self, path: Path):
        self.path = path

    def __str__(self) -> str:
        return str(self.path)

    def names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.path) if _NAME.match(n))
        except FileNotFoundError:
            return []

    def read(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def create(self, name: str, data: bytes) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, self.path / name)  # fails when the name exists: create-only, whole
        except FileExistsError:
            raise _Taken() from None
        finally:
            tmp.unlink(missing_ok=True)


class _Objects:
    """Entries as objects under ``audit/`` of a store on object storage."""

    def __init__(self, remote):
        self.remote = remote

    def __str__(self) -> str:
        return self.remote.url.join(FOLDER)

    def names(self) -> list[str]:
        names = (key.rsplit("/", 1)[-1] for key in self.remote.objects.list(FOLDER + "/"))
        return sorted(n for n in names if _NAME.match(n))

    def read(self, name: str) -> bytes:
        got = self.remote.objects.get(f"{FOLDER}/{name}")
        if got is None:
            raise FileNotFoundError(name)
        return got[0]

    def create(self, name: str, data: bytes) -> None:
        from quarry.store.objstore import PreconditionFailed

        try:
            self.remote.objects.put_if_absent(f"{FOLDER}/{name}", data)
        except PreconditionFailed:
            raise _Taken() from None


def _who(key: str | None = None, client: str | None = None) -> dict:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no name for this uid (a container): the uid says it
        user = str(os.getuid())
    who = {"host": socket.gethostname(), "pid": os.getpid(), "user": user}
    if key is not None:
        who["key"] = key
    if client is not None:
        who["client"] = client
    return who


@dataclass
class Verification:
    """What :meth:`AuditLog.verify` found: ``problems`` empty when the chain is whole."""

    entries: int = 0
    problems: list[str] = field(default_factory=list)
    last_hash: str = GENESIS

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"ok": self.ok, "entries": self.entries, "last_hash": self.last_hash, "problems": self.problems}


class AuditLog:
    """The audit log of one store."""

    def __init__(self, store: Store | Path):
        store = as_store(store)
        self.store = store
        self.where = _Objects(store.remote) if store.remote is not None else _Folder(store.folder / FOLDER)

    def __str__(self) -> str:
        return str(self.where)

    def append(
        self, event: str, details: dict | None = None, key: str | None = None, client: str | None = None
    ) -> dict:
        """Write one entry after the newest one (retrying when another writer takes its number)."""
        if event not in EVENTS:
            raise ValueError(f"unknown audit event {event!r}")
        for _ in range(64):
            names = self.where.names()
            seq, prev = 1, GENESIS
            if names:
                last = json.loads(self.where.read(names[-1]))
                seq, prev = _seq(names[-1]) + 1, last.get("hash", "")
            now = datetime.now(UTC)
            entry = {
                "seq": seq,
                "time": now.isoformat(timespec="microseconds"),
                "event": event,
                "who": _who(key, client),
                "details": details or {},
                "prev": prev,
            }
            entry["hash"] = _digest(entry)
            try:
                self.where.create(_name(seq), (json.dumps(entry, sort_keys=True) + "\n").encode())
                return entry
            except _Taken:
                time.sleep(0.01)
        raise QuarryError(f"the audit log {self} kept changing while this process wrote to it: try again")

    def entries(self, since: datetime | None = None, tolerant: bool = False) -> list[dict]:
        """The entries in order (those at or after ``since``, a UTC time, when given). A damaged
        entry raises, or with ``tolerant`` is skipped with a warning."""
        out = []
        for name in self.where.names():
            try:
                entry = json.loads(self.where.read(name))
                if not isinstance(entry, dict):
                    raise ValueError("not an object")
            except (ValueError, FileNotFoundError) as exc:
                if tolerant:
                    log.warning("skipping audit entry %s/%s: cannot be read (%s)", self.where, name, exc)
                    continue
                raise QuarryError(
                    f"audit entry {self.where}/{name} cannot be read ({exc}): `quarry audit verify` checks the log"
                ) from None
            if since is not None and datetime.fromisoformat(entry.get("time", "")) < since:
                continue
            out.append(entry)
        return out

    def once(self, tag: str) -> bool:
        """Claim ``tag`` for good (a create-only marker ``once-<tag>`` beside the entries, which the
        chain ignores): True for the one caller that claims it first, False for every later one."""
        try:
            self.where.create(f"once-{tag}", b"")
            return True
        except _Taken:
            return False

    def verify(self) -> Verification:
        """Walk the chain: every number present once, every entry matching its hash, every ``prev``
        the hash of the entry before it."""
        result = Verification()
        expected_seq = 1
        prev: str | None = GENESIS
        for name in self.where.names():
            seq = _seq(name)
            result.entries += 1
            if seq != expected_seq:
                result.problems.append(
                    f"entries {expected_seq}-{seq - 1} are missing (removed)"
                    if seq > expected_seq + 1
                    else f"entry {expected_seq} is missing (removed)"
                )
            try:
                entry = json.loads(self.where.read(name))
            except (ValueError, FileNotFoundError):
                result.problems.append(f"entry {seq} ({name}) is not JSON (edited or damaged)")
                expected_seq, prev = seq + 1, None
                continue
            if not isinstance(entry, dict) or entry.get("hash") != _digest(entry):
                result.problems.append(f"entry {seq} does not match its hash (edited)")
            elif entry.get("seq") != seq:
                result.problems.append(f"entry {seq} holds entry {entry.get('seq')} (moved or reordered)")
            elif prev is not None and entry.get("prev") != prev:
                result.problems.append(
                    f"entry {seq} does not follow entry {seq - 1}: its previous hash differs "
                    "(an entry before it was edited, removed or reordered)"
                )
            expected_seq, prev = seq + 1, entry.get("hash") if isinstance(entry, dict) else None
            result.last_hash = prev or result.last_hash
        return result


def audit_of(store: Store | Path) -> AuditLog:
    """The audit log of ``store``."""
    return AuditLog(store)


def record(
    store: Store | Path, event: str, details: dict | None = None, key: str | None = None, client: str | None = None
) -> dict | None:
    """Append an event to the audit log of ``store``; a failure is logged, never raised (recording
    must not undo or fail the operation it records)."""
    try:
        return AuditLog(store).append(event, details, key=key, client=client)
    except Exception as exc:  # noqa: BLE001 - the store out of reach: the operation stands, the log says so
        log.warning("could not write the audit entry %s: %s", event, exc)
        return None


_RELATIVE = re.compile(r"^(\d+)\s*([smhdw])$")


def parse_since(value: str | None, now: datetime | None = None) -> datetime | None:
    """``30d``, ``12h``, ``2w``, ``90m``, ``45s`` ago, or an ISO date/time (UTC unless it says)."""
    if value is None or not value.strip():
        return None
    now = now or datetime.now(UTC)
    text = value.strip()
    rel = _RELATIVE.match(text.lower())
    if rel:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[rel.group(2)]
        return now - timedelta(**{unit: int(rel.group(1))})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r}: use 30d, 12h, 2w, 90m or a date such as 2026-01-31") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
