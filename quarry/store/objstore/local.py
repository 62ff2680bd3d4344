"""``file:///path``: objects as files in a local folder, with the semantics of object storage
(conditional puts under an flock, every write a rename), for tests and for stores on a shared
file system."""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path

from quarry.core.registry import STORES
from quarry.core.storeurl import StoreURL
from quarry.store.objstore import ObjectStore, PreconditionFailed


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root``; conditional puts are checked under an flock, and every
    write is a rename, so a reader never sees half an object."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = StoreURL("file", "", str(self.root).strip("/"))

    def _path(self, key: str) -> Path:
        return self.root / key

    @staticmethod
    def _etag(data: bytes) -> str:
        return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'

    def _locked(self):
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".objstore.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _write(self, key: str, data: bytes) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return self._etag(data)

    def get(self, key):
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None
        return data, self._etag(data)

    def put(self, key, data):
        return self._write(key, data)

    def put_if_absent(self, key, data):
        fd = self._locked()
        try:
            if self._path(key).exists():
                raise PreconditionFailed(self.url.join(key))
            return self._write(key, data)
        finally:
            os.close(fd)

    def put_if_match(self, key, data, etag):
        fd = self._locked()
        try:
            current = self.get(key)
            if current is None or current[1] != etag:
                raise PreconditionFailed(self.url.join(key))
            return self._write(key, data)
        finally:
            os.close(fd)

    def upload_file(self, key, path, if_absent=True):
        data = Path(path).read_bytes()
        if if_absent:
            self.put_if_absent(key, data)
        else:
            self.put(key, data)

    def download_file(self, key, path):
        import shutil

        try:
            shutil.copyfile(self._path(key), path)
        except IsADirectoryError:
            raise FileNotFoundError(self.url.join(key)) from None

    def list(self, prefix=""):
        out = []
        for p in self.root.rglob("*"):
            rel = p.relative_to(self.root).as_posix()
            if p.is_file() and rel.startswith(prefix) and not p.name.startswith("."):
                out.append(rel)
        return sorted(out)

    def delete(self, keys):
        for key in keys:
            self._path(key).unlink(missing_ok=True)


@STORES.register("file")
def _file(url: StoreURL) -> ObjectStore:
    return LocalObjectStore(Path("/" + url.prefix))
