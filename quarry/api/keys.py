"""API keys: ``quarry keys create|list|revoke`` and the bearer check of ``quarry api``.

A token is ``qk_<id>_<secret>``: ``id`` (12 hex digits) names the key, ``secret`` is 32 random bytes.
Only ``sha256(salt + secret)`` is stored, with a random salt per key, so the key file gives no
usable token to whoever reads it; the token is printed once, at creation. A check looks the key up
by its id and compares digests with :func:`hmac.compare_digest` (constant time), and spends the
same work on an id it does not know.

Why a salted SHA-256 and not a slow password hash (scrypt, argon2): the secret is 256 random bits,
so there is nothing to guess; a slow hash protects low-entropy passwords and would cost every API
request tens of milliseconds.

Where keys live (:func:`key_store`): ``$QUARRY_KEYS_FILE`` when set (any store, e.g. a file
shared by the servers of a store on object storage); else ``keys.json`` in the store folder; for a
store on object storage (``s3://``, ``gs://``, ``az://``) the object ``keys.json`` next to
``CURRENT``, written with conditional puts so two ``keys create`` never lose one another's key.
"""

from __future__ import annotations

import builtins
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from quarry.core.environment import environment
from quarry.core.errors import QuarryError, StoreNotFound, UsageError
from quarry.core.principals import normalise

if TYPE_CHECKING:
    from quarry.store.handle import Store

KEYS_FILE = "keys.json"
FORMAT = 1
PREFIX = "qk"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_TOKEN = re.compile(r"^qk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_RELATIVE = re.compile(r"^(\d+)\s*([mhdw])$")
log = logging.getLogger("quarry.audit")


@dataclass
class Key:
    """A stored key: everything but the secret (whose salted hash is kept)."""

    id: str
    name: str
    salt: str
    hash: str
    principals: list[str] = field(default_factory=list)
    admin: bool = False
    created: float = 0.0
    expires: float | None = None
    revoked: float | None = None
    rate_limit: int | None = None  # requests per minute; None: the server's default, 0: unlimited
    answers: bool = True  # False: search only, no /v1/answer or MCP answer
    answer_rate_limit: int | None = None  # answers per minute; None: the server's default, 0: unlimited

    def status(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        if self.revoked is not None:
            return "revoked"
        if self.expires is not None and self.expires <= now:
            return "expired"
        return "active"

    def public(self) -> dict:
        """What ``keys list`` shows: never the hash or the salt."""
        out = {k: v for k, v in asdict(self).items() if k not in ("salt", "hash")}
        for name in ("created", "expires", "revoked"):
            out[name] = _iso(out[name])
        out["status"] = self.status()
        return out


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode("ascii")).hexdigest()


def parse_expiry(value: str | None, now: float | None = None) -> float | None:
    """``30d``, ``12h``, ``2w``, ``90m`` from now, or an ISO date/time (UTC unless it says); None for none."""
    if value is None or not str(value).strip():
        return None
    now = time.time() if now is None else now
    text = str(value).strip()
    rel = _RELATIVE.match(text.lower())
    if rel:
        n, unit = int(rel.group(1)), rel.group(2)
        seconds = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}[unit] * n
        if seconds <= 0:
            raise UsageError(f"--expires {text}: the key would expire at once")
        return now + seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--expires {text!r}: use 30d, 12h, 2w, 90m or a date such as 2027-01-31") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if len(text) == 10:  # a date: the key works through that whole day
        moment += timedelta(days=1)
    if moment.timestamp() <= now:
        raise UsageError(f"--expires {text}: that is in the past")
    return moment.timestamp()


# --- where the keys are kept ------------------------------------------------------------------------


class FileKeys:
    """Keys in a JSON file (mode 0600), changed under an flock and replaced atomically."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.path)

    def read(self) -> tuple[list[dict], object]:
        """The key records and a version token (the file's identity: changes when it is rewritten)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return [], None
        return _records(self.path.read_bytes(), str(self.path)), (st.st_ino, st.st_mtime_ns, st.st_size)

    def version(self) -> object:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @contextmanager
    def changing(self):
        """Yield the records to change in place; written back when the block ends."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            records, _ = self.read()
            yield records
            tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
            fd_tmp = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd_tmp, "w", encoding="utf-8") as fh:
                fh.write(_dump(records))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class ObjectKeys:
    """Keys in the object ``keys.json`` of a store on object storage; a change is a conditional put
    (create-only, or If-Match on the version read), retried when another writer got there first."""

    def __init__(self, remote):
        self.remote = remote

    def __str__(self) -> str:
        return self.remote.url.join(KEYS_FILE)

    def read(self) -> tuple[list[dict], object]:
        got = self.remote.objects.get(KEYS_FILE)
        if got is None:
            return [], None
        body, etag = got
        return _records(body, str(self)), etag

    def version(self) -> object:
        return self.read()[1]

    @contextmanager
    def changing(self):
        """Yield the records to change in place; a conditional put writes them back, and a writer
        that lost the race raises :class:`_Retry` (``KeyRing`` reads and applies the change again)."""
        from quarry.store.objstore import PreconditionFailed

        records, etag = self.read()
        yield records
        body = _dump(records).encode("utf-8")
        try:
            if etag is None:
                self.remote.objects.put_if_absent(KEYS_FILE, body)
            else:
                self.remote.objects.put_if_match(KEYS_FILE, body, etag)
        except PreconditionFailed:
            time.sleep(0.05 + secrets.randbelow(100) / 1000)
            raise _Retry() from None


class _Retry(Exception):
    """Another writer changed the keys between this one's read and its conditional put."""


def _records(body: bytes, where: str) -> list[dict]:
    try:
        data = json.loads(body)
        records = data["keys"]
        if not isinstance(records, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise QuarryError(
            f"the key file {where} is damaged (not quarry's keys JSON): restore it from a backup, "
            "or move it away and create new keys"
        ) from None
    return records


def _dump(records: list[dict]) -> str:
    return json.dumps({"format": FORMAT, "keys": records}, indent=2) + "\n"


def key_store(store: Store | Path, keys_file: str | None = None):
    """Where the keys of ``store`` (a store, or a store folder: local or the cache of a remote one) are kept."""
    keys_file = keys_file or environment().keys_file or None
    if keys_file:
        return FileKeys(Path(keys_file).expanduser().absolute())
    from quarry.store.handle import as_store

    store = as_store(store)
    if store.remote is not None:
        return ObjectKeys(store.remote)
    return FileKeys(store.folder / KEYS_FILE)


def open_ring(store: Store | str | Path | None, keys_file: str | None = None) -> KeyRing:
    """The keys of the store at ``store`` (:func:`key_store`), for ``quarry keys``: :class:`StoreNotFound`
    when they would go in a folder that does not exist (a mistyped ``--db`` makes no store, and
    lists no keys of one)."""
    from quarry.store.handle import open_store

    where = key_store(open_store(store), keys_file)
    if isinstance(where, FileKeys) and not where.path.parent.is_dir():
        if where.path.name == KEYS_FILE and not (keys_file or environment().keys_file):
            folder = where.path.parent
            raise StoreNotFound(f"no store at {folder}: check --db, or run `quarry index PATH --db {folder}` first")
        raise StoreNotFound(f"no folder {where.path.parent} for the key file {where.path.name}: check --keys-file")
    return KeyRing(where)


# --- the key ring ---------------------------------------------------------------------------------


def check_new(name: str, principals=(), admin: bool = False, rate_limit: int | None = None) -> list[str]:
    """The normalised principals of a key to create; :class:`UsageError` for a name, principals or
    rate limit a key cannot have (checked before any store is opened)."""
    if not _NAME.match(name or ""):
        raise UsageError(
            f"key name {name!r}: 1-64 letters, digits, '_', '.', '@' or '-', starting with a letter or digit"
        )
    names = list(normalise(principals))
    if admin and names:
        raise UsageError("an admin key reads every document: give --admin or --principal, not both")
    if rate_limit is not None and rate_limit < 0:
        raise UsageError("--rate-limit must be 0 (unlimited) or more requests per minute")
    return names


class KeyRing:
    """The keys of one store: create, list, revoke, and check a bearer token."""

    def __init__(self, where, audit=None) -> None:
        self.where = where
        self.audit = audit  # the store's AuditLog: creations and revocations are recorded there
        self._keys: dict[str, Key] = {}
        self._version: object = ()
        self._ever = False

    def _change(self, fn):
        """Apply ``fn(records)`` under the store's write protocol (retrying lost object-storage races)."""
        for _ in range(16):
            try:
                with self.where.changing() as records:
                    result = fn(records)
                return result
            except _Retry:
                continue
        raise QuarryError(f"{self.where} kept changing while this command wrote it: run it again")

    def create(
        self,
        name: str,
        principals=(),
        admin: bool = False,
        expires: float | None = None,
        rate_limit: int | None = None,
        *,
        answers: bool = True,
        answer_rate_limit: int | None = None,
    ) -> tuple[Key, str]:
        """A new key and its token (shown once; only its salted hash is kept)."""
        names = check_new(name, principals, admin, rate_limit)
        if answer_rate_limit is not None and answer_rate_limit < 0:
            raise UsageError("--answer-rate-limit must be 0 (unlimited) or more answers per minute")
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        key = Key(
            id=secrets.token_hex(6),
            name=name,
            salt=salt,
            hash=_digest(salt, secret),
            principals=names,
            admin=admin,
            created=time.time(),
            expires=expires,
            rate_limit=rate_limit,
            answers=answers,
            answer_rate_limit=answer_rate_limit,
        )

        def add(records):
            active = [r for r in records if r.get("name") == name and Key(**r).status() == "active"]
            if active:
                raise UsageError(f"a key named {name!r} exists: revoke it first, or choose another name")
            records.append(asdict(key))

        self._change(add)
        self._record("key.created", key)
        return key, f"{PREFIX}_{key.id}_{secret}"

    def list(self) -> list[Key]:
        records, _ = self.where.read()
        return [Key(**r) for r in records]

    def revoke(self, name_or_id: str) -> builtins.list[Key]:  # `list` here is the method above
        """Revoke the active keys of that name (or the key of that id); the revoked keys."""
        done: list[Key] = []

        def revoke(records):
            now = time.time()
            for r in records:
                if (r.get("name") == name_or_id or r.get("id") == name_or_id) and r.get("revoked") is None:
                    r["revoked"] = now
                    done.append(Key(**r))
            if not done:
                raise UsageError(f"no active key named {name_or_id!r}: `quarry keys list` shows them")

        self._change(revoke)
        for key in done:
            self._record("key.revoked", key)
        return done

    def note_expired(self) -> builtins.list[Key]:
        """Record in the audit log each key that has expired since it was last looked at (a key
        expires by the clock, with no command to record it); the keys recorded now."""
        if self.audit is None:
            return []
        try:
            seen = {
                e.get("details", {}).get("key_id")
                for e in self.audit.entries(tolerant=True)
                if e.get("event") == "key.expired"
            }
            expired = [k for k in self.list() if k.status() == "expired" and k.id not in seen]
            # one marker per key: workers that read the log at once record it once, not each
            expired = [k for k in expired if self.audit.once(f"expired-{k.id}")]
        except Exception as exc:  # noqa: BLE001 - the log out of reach: listing keys goes on
            log.warning("could not record expired keys in the audit log %s: %s", self.audit, exc)
            return []
        return [k for k in expired if self._record("key.expired", k)]

    def _record(self, event: str, key: Key) -> bool:
        """Append ``event`` to the audit log; a failure is a warning, never an error (the key change
        it records stands, and its token is still shown)."""
        if self.audit is None:
            return False
        try:
            self.audit.append(
                event,
                {
                    "key_id": key.id,
                    "key_name": key.name,
                    "admin": key.admin,
                    "principals": len(key.principals),
                    "expires": _iso(key.expires),
                },
            )
            return True
        except Exception as exc:  # noqa: BLE001 - recording never fails what it records
            log.warning("could not write the audit entry %s for key %r to %s: %s", event, key.name, self.audit, exc)
            return False

    # --- the server's side --------------------------------------------------------------------

    def refresh(self, force: bool = False) -> None:
        """Re-read the keys when they changed on disk (a stat; on object storage, a GET)."""
        version = self.where.version()
        if force or version != self._version:
            records, version = self.where.read()
            self._keys = {r["id"]: Key(**r) for r in records}
            self._ever = self._ever or bool(records)
            self._version = version

    @property
    def required(self) -> bool:
        """Whether requests need a key: once a store has had a key (revoked and expired ones count,
        so revoking the last key never opens the server)."""
        return self._ever or bool(self._keys)

    def get(self, key_id: str) -> Key | None:
        """The key of that id as last read (whatever its status), or None: the key a token claims,
        which only :meth:`identify` confirms."""
        return self._keys.get(key_id)

    def verify(self, token: str | None) -> Key | None:
        """The active key this bearer token belongs to, or None. Constant time in the secret."""
        key = self.identify(token)
        return key if key is not None and key.status() == "active" else None

    def identify(self, token: str | None) -> Key | None:
        """The key whose secret this token carries, whatever its status (revoked, expired), or None:
        who a denied request really came from. Constant time in the secret."""
        m = _TOKEN.match(token or "")
        ident, secret = (m.group(1), m.group(2)) if m else ("", "x" * 43)
        key = self._keys.get(ident)
        salt, stored = (key.salt, key.hash) if key is not None else ("00" * 16, "0" * 64)
        ok = hmac.compare_digest(_digest(salt, secret), stored)
        if not ok or key is None or m is None:
            return None
        return key
