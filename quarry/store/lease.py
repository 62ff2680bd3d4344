"""The single-writer lease of a store on object storage, where there is no ``flock``.

The lease is one object, ``<store>/lease``: JSON with a random owner token, host, pid, start and
expiry. It is taken and renewed only by conditional puts, so of two writers that read the same
state only one put wins:

- no lease object: ``put_if_absent`` (``If-None-Match: *``);
- a lease that has expired, or whose holder is a dead process on this very host: taken over with
  ``put_if_match`` on the etag that was read;
- a live lease of another writer: :class:`StoreLocked` naming the holder (or, with
  ``if_busy=skip``, a skipped run, exactly as for a local store).

A thread renews the lease every third of its time to live (``QUARRY_LEASE_SECONDS``, 60 by
default), again with ``put_if_match`` on its own last etag. A renewal that fails means another
writer took the lease over (this process stalled past the expiry): the lease is marked lost, and
the commit refuses to move ``CURRENT`` (:meth:`Lease.check`). Releasing deletes the object when it
is still ours. A process killed with SIGKILL leaves its lease until the expiry, or until the next
writer on the same host sees that its pid is gone.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from quarry.core.environment import environment
from quarry.core.errors import QuarryError, StoreLocked
from quarry.store.objstore import ObjectStore, PreconditionFailed

LEASE = "lease"


def lease_seconds() -> float:
    """How long a writer's lease lasts (``QUARRY_LEASE_SECONDS``)."""
    return environment().lease_seconds


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe(info: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    left = info.get("expires", 0) - time.time()
    return f"pid {info.get('pid')} on {info.get('host')}, started {started}, lease expires in {max(left, 0):.0f} s"


class Lease:
    """The writer lease of one object store. ``acquire`` / ``release``, or a ``with`` block."""

    def __init__(self, store: ObjectStore, ttl: float | None = None):
        self.store = store
        self.ttl = ttl or lease_seconds()
        self.owner = uuid.uuid4().hex
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def _body(self) -> bytes:
        now = time.time()
        return json.dumps(
            {
                "owner": self.owner,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": getattr(self, "_started", now),
                "expires": now + self.ttl,
            }
        ).encode()

    def _takeable(self, info: dict) -> bool:
        if info.get("expires", 0) < time.time():
            return True
        pid = info.get("pid")
        return info.get("host") == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid)

    def acquire(self) -> Lease:
        """Take the lease or raise :class:`StoreLocked` naming its live holder."""
        self._started = time.time()
        current = self.store.get(LEASE)
        try:
            if current is None:
                self.etag = self.store.put_if_absent(LEASE, self._body())
            else:
                data, etag = current
                try:
                    info = json.loads(data)
                except ValueError:
                    info = {}  # a torn or foreign object: treat it as expired
                if info and not self._takeable(info):
                    raise StoreLocked(
                        f"store {self.store.url} is leased by another index run ({describe(info)}); "
                        "wait for it to finish"
                    )
                self.etag = self.store.put_if_match(LEASE, self._body(), etag)
        except PreconditionFailed:
            mine = self._ours()
            if mine is None:
                raise StoreLocked(
                    f"store {self.store.url}: another index run took the writer lease at the same "
                    "moment; wait for it to finish"
                ) from None
            self.etag = mine
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="quarry-lease", daemon=True)
        self._thread.start()
        return self

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            self.renew()

    def renew(self) -> None:
        with self._guard:
            if self.lost or self.etag is None:
                return
            try:
                self.etag = self.store.put_if_match(LEASE, self._body(), self.etag)
            except PreconditionFailed:
                mine = self._ours()
                if mine is None:
                    self.lost = True
                else:
                    self.etag = mine
            except Exception:  # noqa: BLE001, S110 - a network blip: the next renewal tries again before the expiry
                pass

    def _ours(self) -> str | None:
        """The lease object's etag when it carries our owner token, else None.

        SDKs retry a put whose answer was lost; the retry then fails its condition against what
        the first attempt wrote. The owner token is random per lease, so a lease object holding
        it was written by this process: the put won.
        """
        try:
            got = self.store.get(LEASE)
            return got[1] if got is not None and json.loads(got[0]).get("owner") == self.owner else None
        except Exception:  # noqa: BLE001 - cannot read the lease back: the put is not known to have won
            return None

    def check(self) -> None:
        """Raise unless the lease is still ours: called right before the commit's pointer put."""
        self.renew()
        if self.lost:
            raise QuarryError(
                f"store {self.store.url}: this run lost its writer lease (it stalled past the expiry "
                "and another writer took over); nothing was committed: run again"
            )

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._guard:
            if self.etag is None or self.lost:
                self.etag = None
                return
            current = self.store.get(LEASE)
            if current is not None and current[1] == self.etag:
                self.store.delete([LEASE])
            self.etag = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
