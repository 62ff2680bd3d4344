"""A store on object storage, worked on through a local folder.

``--db s3://bucket/prefix`` maps to a local folder (:func:`quarry.core.storeurl.local_dir`,
``~/.cache/quarry/stores/<hash of the URL>/``), whose file ``REMOTE`` names the URL; the store object
(:func:`quarry.store.handle.open_store`) holds that folder and the :class:`Remote` of the URL, opened
once per process. Everything in quarry that works on a store's files works on that folder as it does
on a local store; this module moves the committed state between it and the object store:

- **pull** (:meth:`Remote.pull`): read the remote ``CURRENT``; download the catalog and the
  search index files of that generation unless the folder has them (a generation's files are
  immutable, so a cache hit needs no download; downloads go to a temporary name and are renamed
  into place); write the local ``CURRENT``. Readers pull before each query (one GET of
  ``CURRENT``); the writer pulls once, after taking the lease.
- **commit** (:meth:`Remote.commit`, from :func:`quarry.store.layout.write_pointer`): upload
  ``catalog-<gen>.duckdb`` and ``index-<gen>/`` with create-only puts (new names: a reader never
  sees a file change), check that the lease is still ours, then put ``CURRENT`` with
  ``If-Match`` on the etag the pull read (``If-None-Match: *`` for the first commit). That put is
  the commit point. Then generations older than the last ``QUARRY_KEEP_GENERATIONS`` (2) are
  deleted.
- the **lease** (:mod:`quarry.store.lease`) replaces the flock, which still guards the local
  folder against a second writer on the same host.
- the **run journal** becomes one object per run, ``journal/<run_id>.json``: object stores have no
  append, and a unique key needs no lock.

LanceDB writes the vector table straight to ``<url>/lance`` (it commits its versions with
create-only manifest puts) and reads its endpoint and credentials from the same AWS environment;
on Azure it gets the account quarry's own client resolved (:meth:`Remote.lance_options`).
Readers never open LanceDB: search reads the catalog and the index files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from dataclasses import asdict
from pathlib import Path

from quarry.core import faults
from quarry.core.environment import environment
from quarry.core.errors import QuarryError, StoreCorrupt
from quarry.core.storeurl import StoreURL
from quarry.retrieval.searchindex import MANIFEST, folder_name, segment_generations
from quarry.store import fts
from quarry.store.generations import keep_generations, kept_range, referenced
from quarry.store.lease import Lease
from quarry.store.objstore import ObjectStore, PreconditionFailed, open_objects
from quarry.store.pointer import POINTER, Pointer, write_local_pointer

JOURNAL_PREFIX = "journal/"
_GEN = re.compile(r"^(?:catalog-(\d+)\.duckdb|index-(\d+)/.*)$")


def check_seconds() -> float:
    """How long a reader trusts its last read of CURRENT: ``QUARRY_REMOTE_CHECK_SECONDS`` (0: every call)."""
    return environment().remote_check_seconds


def _generation_of(key: str) -> int | None:
    m = _GEN.match(key)
    return int(m.group(1) or m.group(2)) if m else None


class Remote:
    """The object store behind one local folder, and this process's view of its pointer."""

    def __init__(self, url: StoreURL):
        self.url = url
        self._objects: ObjectStore | None = None
        self.lease: Lease | None = None
        self.etag: str | None = None  # etag of CURRENT as last pulled; the commit's If-Match
        self._pull_guard = threading.Lock()
        self._pulled: tuple[float, object] | None = None  # (monotonic time, pointer) of the last pull

    @property
    def objects(self) -> ObjectStore:
        if self._objects is None:
            self._objects = open_objects(self.url)
        return self._objects

    def lance_uri(self) -> str:
        return self.url.join("lance")

    def lance_options(self) -> dict[str, str] | None:
        """LanceDB's ``storage_options`` for this store (None: the environment, as LanceDB reads it)."""
        return self.objects.lance_options()

    # --- reading ---------------------------------------------------------------------------

    def read_pointer(self):
        """(Pointer, etag) of the remote CURRENT, or (None, None)."""
        got = self.objects.get(POINTER)
        if got is None:
            return None, None
        data, etag = got
        try:
            return Pointer(**json.loads(data)), etag
        except (ValueError, TypeError) as exc:
            raise StoreCorrupt(f"{self.url.join(POINTER)} is damaged (not a valid commit pointer)") from exc

    def pull(self, store: Path, attempts: int = 5, max_age: float = 0.0):
        """Make ``store`` hold the committed generation; returns its pointer (None: nothing committed).

        ``max_age`` > 0 skips the GET of CURRENT when the last pull is younger (readers:
        ``QUARRY_REMOTE_CHECK_SECONDS``); the writer always reads it.
        """
        with self._pull_guard:
            if max_age > 0 and self._pulled is not None and time.monotonic() - self._pulled[0] < max_age:
                return self._pulled[1]
            for attempt in range(attempts):
                pointer, etag = self.read_pointer()
                if pointer is None:
                    (store / POINTER).unlink(missing_ok=True)
                    self.etag = None
                    self._pulled = (time.monotonic(), None)
                    return None
                try:
                    self._fetch_generation(store, pointer)
                except FileNotFoundError:  # removed by a newer commit while we read: read CURRENT again
                    time.sleep(0.05 * (attempt + 1))
                    continue
                local = store / POINTER
                body = json.dumps(asdict(pointer), indent=2)
                if not local.is_file() or local.read_text(encoding="utf-8") != body:
                    write_local_pointer(store, pointer)
                self.etag = etag
                self._prune_local(store, pointer.generation)
                self._pulled = (time.monotonic(), pointer)
                return pointer
        raise QuarryError(f"could not read a complete generation of {self.url}: it keeps changing")

    def _fetch_generation(self, store: Path, pointer) -> None:
        """Download the catalog files and index folders of the generation ``pointer`` names and of
        every layer it reads (quarry/store/layers.py), each unless the folder has it."""
        chain = pointer.layers or self._layers_of(store, pointer.generation)
        for gen in chain:
            self._fetch_layer(store, gen)

    def _fetch_layer(self, store: Path, generation: int) -> None:
        name = Pointer.catalog_name(generation)
        catalog = store / name
        if not catalog.is_file():
            tmp = store / f".dl-{name}.{os.getpid()}.{threading.get_ident()}"
            try:
                self.objects.download_file(name, tmp)
                os.replace(tmp, catalog)
            finally:
                tmp.unlink(missing_ok=True)
        index_name = folder_name(generation)
        folder = store / index_name
        if folder.is_dir():
            return
        keys = self.objects.list(index_name + "/")
        if not keys:
            return  # a generation committed without index files: the reader builds them in memory
        tmp = store / f".dl-{index_name}.{os.getpid()}.{threading.get_ident()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            for key in keys:
                target = tmp / key[len(index_name) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                self.objects.download_file(key, target)
            os.replace(tmp, folder)
        except OSError as exc:
            if not folder.is_dir():  # another reader renamed its copy in first: use that one
                raise FileNotFoundError(str(exc)) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _layers_of(self, store: Path | None, generation: int) -> tuple[int, ...]:
        """The layers generation ``generation`` reads: from its index manifest, in the local folder
        or on the object store; ``(generation,)`` when it has none."""

        if store is not None:
            local = segment_generations(store / folder_name(generation))
            if local:
                return tuple(local)
        got = self.objects.get(f"{folder_name(generation)}/{MANIFEST}")
        try:
            segments = json.loads(got[0]).get("segments") if got is not None else None
        except ValueError:
            segments = None
        return tuple(int(s["generation"]) for s in segments) if segments else (generation,)

    @staticmethod
    def _prune_local(store: Path, generation: int) -> None:
        """Drop cached generations the retention no longer keeps and no kept one reads (a reader may
        still map the previous one)."""
        stays = referenced(store, generation, max(2, keep_generations()))
        for path in list(store.glob("catalog-*.duckdb")) + list(store.glob("index-*")):
            gen = _generation_of(path.name if path.suffix == ".duckdb" else path.name + "/")
            if gen is not None and gen not in stays and gen < generation:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                    Path(str(path) + ".wal").unlink(missing_ok=True)
        fts.remove_unkept(store, kept_range(generation, max(2, keep_generations())), None, older_than=generation)

    def generations(self) -> set[int]:
        """The generations whose catalog is on the object store."""
        return {g for k in self.objects.list("catalog-") if (g := _generation_of(k)) is not None}

    def fetch_generation(self, store: Path, generation: int) -> None:
        """Download generation ``generation``'s catalog and index files, and those of the layers it
        reads, into ``store`` unless there (``quarry rollback`` to a generation the local cache no
        longer holds)."""
        self._fetch_layer(store, generation)
        chain = self._layers_of(store, generation)
        self._fetch_generation(
            store, Pointer(generation, Pointer.catalog_name(generation), "", 0, "", 0, 0.0, layers=chain)
        )

    # --- writing (the caller holds the lease) ------------------------------------------------

    def acquire(self, store: Path) -> None:
        """Take the writer lease, pull the committed generation and delete what dead runs uploaded."""
        lease = Lease(self.objects).acquire()
        try:
            pointer = self.pull(store)
            committed = pointer.generation if pointer else 0
            debris = [k for k in self.objects.list("") if (_generation_of(k) or 0) > committed]
            self.objects.delete(debris)
        except BaseException:
            lease.release()
            raise
        self.lease = lease

    def release(self) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()

    def commit(self, store: Path, pointer, upload: bool = True) -> None:
        """Upload the generation's files, then move CURRENT with a conditional put: the commit point.

        When it fails, the generation's local files go too: they must never pass for the files of
        a generation of the same number that another writer commits.
        """
        try:
            self._commit(store, pointer, upload)
        except BaseException:
            if not upload:  # the committed generation's own files
                raise
            (store / pointer.catalog).unlink(missing_ok=True)
            shutil.rmtree(store / folder_name(pointer.generation), ignore_errors=True)
            raise

    def _commit(self, store: Path, pointer, upload: bool) -> None:
        if self.lease is None:
            raise QuarryError(f"committing to {self.url} without the writer lease")
        name = folder_name(pointer.generation)
        files = [(pointer.catalog, store / pointer.catalog)] if upload else []
        folder = store / name
        if upload and folder.is_dir():
            files += [
                (f"{name}/{p.relative_to(folder).as_posix()}", p) for p in sorted(folder.rglob("*")) if p.is_file()
            ]
        try:
            for key, path in files:
                self.objects.upload_file(key, path, if_absent=True)
        except PreconditionFailed:
            raise QuarryError(
                f"generation {pointer.generation} already exists on {self.url}: another writer "
                "committed it; nothing was committed by this run: run again"
            ) from None
        faults.point("after-upload")  # killed here: files no pointer names, removed by the next writer
        self.lease.check()
        body = json.dumps(asdict(pointer), indent=2).encode()
        try:
            if self.etag is None:
                self.etag = self.objects.put_if_absent(POINTER, body)
            else:
                self.etag = self.objects.put_if_match(POINTER, body, self.etag)
        except PreconditionFailed:
            landed = self._landed(body)
            if landed is not None:  # our own put, retried after its answer was lost: committed
                self.etag = landed
                return
            self.objects.delete([k for k, _ in files])
            raise QuarryError(
                f"{self.url.join(POINTER)} changed while this run held the lease (another writer "
                "committed); nothing was committed by this run: run again"
            ) from None

    def _landed(self, body: bytes) -> str | None:
        """The etag of CURRENT when it holds exactly ``body``, else None.

        A conditional put whose answer is lost (a dropped connection) is retried by the SDK; the
        retry then fails its condition against the object the first attempt wrote. Telling that
        apart from another writer's commit matters: deleting the generation's files would leave
        CURRENT naming files that are gone. The body carries ``committed_at`` to the microsecond,
        so another writer's pointer is never byte-equal to ours.
        """
        try:
            got = self.objects.get(POINTER)
        except Exception:  # noqa: BLE001 - cannot tell: treat it as lost, the safe side for the caller's message
            return None
        return got[1] if got is not None and got[0] == body else None

    def after_commit(self, pointer) -> None:
        """Best-effort tidying after the pointer moved: old generations beyond the retention."""
        try:
            self.remove_old_generations(pointer.generation)
        except Exception:  # noqa: BLE001, S110 - the next commit (or `quarry maintain`) tries again
            pass

    def remove_old_generations(self, committed: int, keep: int | None = None) -> list[str]:
        """Delete remote generations neither among the last ``keep`` nor read by one of them (their
        layers), and any newer than ``committed``."""
        keep = keep or keep_generations()
        keys = self.objects.list("")
        present = {g for k in keys if (g := _generation_of(k)) is not None}
        stays: set[int] = set()
        for gen in present:
            if committed - keep < gen <= committed:
                stays.add(gen)
                stays.update(self._layers_of(None, gen))
        doomed = [k for k in keys if (g := _generation_of(k)) is not None and (g > committed or g not in stays)]
        self.objects.delete(doomed)
        return doomed

    # --- the run journal -----------------------------------------------------------------------

    def journal_record(self, row: dict) -> None:
        self.objects.put(f"{JOURNAL_PREFIX}{row['run_id']}.json", json.dumps(row, default=str).encode())

    def journal_pending(self) -> tuple[list[dict], list[str]]:
        rows, keys = [], []
        for key in self.objects.list(JOURNAL_PREFIX):
            got = self.objects.get(key)
            if got is None:
                continue
            try:
                rows.append(json.loads(got[0]))
                keys.append(key)
            except ValueError:
                continue
        order = sorted(range(len(rows)), key=lambda i: str(rows[i].get("started", "")))
        return [rows[i] for i in order], [keys[i] for i in order]


class JournalObject:
    """A claimed journal object; ``unlink`` as :func:`quarry.store.journal.forget` calls it on files."""

    def __init__(self, remote: Remote, key: str):
        self.remote, self.key = remote, key

    def unlink(self, missing_ok: bool = True) -> None:
        self.remote.objects.delete([self.key])
