"""Object storage under a store URL: the few operations the commit protocol needs.

``s3://bucket/prefix`` goes through boto3, which reads the endpoint and the credentials from the
standard AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_DEFAULT_REGION``); ``az://container/prefix`` through azure-storage-blob
(:mod:`quarry.store.objstore_azure`); ``file:///path`` is a local folder with the same semantics, for tests and
for stores on a shared file system. Object storage has no rename and no lock, so everything that
must not be overwritten is written with a *conditional put*:

- :meth:`ObjectStore.put_if_absent` — ``If-None-Match: *``: fails when the key exists;
- :meth:`ObjectStore.put_if_match` — ``If-Match: <etag>``: fails when the object changed since
  it was read.

Both raise :class:`PreconditionFailed` when the condition does not hold. Keys are relative to the
store's prefix. Nothing here logs; credentials never leave boto3.

Each backend registers a factory ``(StoreURL) -> ObjectStore`` for its scheme in
:data:`~quarry.core.registry.STORES` where it is written (a plugin: entry point group
``quarry.stores``); a backend must implement the primitives of :class:`ObjectStore`, the
conditional puts included, and pass ``tests/test_objstore.py``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path

from quarry.core.cloud import s3_client
from quarry.core.errors import QuarryError
from quarry.core.registry import STORES
from quarry.core.storeurl import StoreURL

MULTIPART_BYTES = 64 << 20  # objects above this go up in parts of this size


class PreconditionFailed(Exception):
    """A conditional put lost: the key exists (put_if_absent) or changed (put_if_match)."""


def open_store(url: StoreURL) -> ObjectStore:
    """The object store for ``url``: the backend registered for its scheme in
    :data:`~quarry.core.registry.STORES` (quarry's s3, gs, az and file, or a plugin's)."""
    return STORES.get(url.scheme)(url)


class ObjectStore:
    """Keys relative to one store prefix. Subclasses implement the primitives."""

    url: StoreURL

    def get(self, key: str) -> tuple[bytes, str] | None:
        """(content, etag), or None when the key does not exist."""
        raise NotImplementedError

    def put(self, key: str, data: bytes) -> str:
        """Write unconditionally; returns the new etag."""
        raise NotImplementedError

    def put_if_absent(self, key: str, data: bytes) -> str:
        raise NotImplementedError

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        raise NotImplementedError

    def upload_file(self, key: str, path: Path, if_absent: bool = True) -> None:
        """Upload a local file (create-only unless ``if_absent`` is False)."""
        raise NotImplementedError

    def download_file(self, key: str, path: Path) -> None:
        """Download to ``path`` (the caller renames it into place). FileNotFoundError if absent."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, sorted."""
        raise NotImplementedError

    def delete(self, keys: list[str]) -> None:
        """Delete ``keys``; missing keys are not an error."""
        raise NotImplementedError

    def lance_options(self) -> dict[str, str] | None:
        """LanceDB ``storage_options`` naming the same account, or None: LanceDB reads the environment."""
        return None


# --- S3 ---------------------------------------------------------------------------------------

def _code(exc) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _status(exc) -> int:
    return int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


class S3ObjectStore(ObjectStore):
    def __init__(self, url: StoreURL):
        self.url = url
        self.bucket = url.bucket
        self.client = s3_client()

    def _key(self, key: str) -> str:
        return f"{self.url.prefix}/{key}" if self.url.prefix else key

    def _call(self, what: str, key: str, fn, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            if _status(exc) == 412 or _code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise PreconditionFailed(f"{self.url.join(key)}: {_code(exc) or 412}") from None
            if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(self.url.join(key)) from None
            raise QuarryError(f"{what} {self.url.join(key)} failed: {_code(exc) or _status(exc)} "
                              f"({exc.response.get('Error', {}).get('Message', '')})") from None
        except BotoCoreError as exc:  # no endpoint, no credentials, a timeout: the class and its message
            raise QuarryError(f"{what} {self.url.join(key)} failed: {type(exc).__name__}: {exc}; check the "
                              "AWS_* environment (endpoint, region, credentials)") from None

    def get(self, key):
        try:
            r = self._call("reading", key, self.client.get_object, Key=self._key(key))
        except FileNotFoundError:
            return None
        return r["Body"].read(), r["ETag"]

    def put(self, key, data):
        return self._call("writing", key, self.client.put_object, Key=self._key(key), Body=data)["ETag"]

    def put_if_absent(self, key, data):
        return self._call("writing", key, self.client.put_object, Key=self._key(key), Body=data,
                          IfNoneMatch="*")["ETag"]

    def put_if_match(self, key, data, etag):
        try:
            return self._call("writing", key, self.client.put_object, Key=self._key(key), Body=data,
                              IfMatch=etag)["ETag"]
        except FileNotFoundError:  # S3 answers 404 when the object is gone: the condition fails too
            raise PreconditionFailed(self.url.join(key)) from None

    def upload_file(self, key, path, if_absent=True):
        cond = {"IfNoneMatch": "*"} if if_absent else {}
        size = os.path.getsize(path)
        if size <= MULTIPART_BYTES:
            with open(path, "rb") as fh:
                self._call("uploading", key, self.client.put_object, Key=self._key(key), Body=fh, **cond)
            return
        # Multipart, with the create-only condition on the completion (S3 checks it there).
        k = self._key(key)
        upload = self._call("uploading", key, self.client.create_multipart_upload, Key=k)["UploadId"]
        try:
            parts = []
            with open(path, "rb") as fh:
                for number in range(1, size // MULTIPART_BYTES + 2):
                    chunk = fh.read(MULTIPART_BYTES)
                    if not chunk:
                        break
                    r = self._call("uploading", key, self.client.upload_part, Key=k, UploadId=upload,
                                   PartNumber=number, Body=chunk)
                    parts.append({"PartNumber": number, "ETag": r["ETag"]})
            self._call("uploading", key, self.client.complete_multipart_upload, Key=k, UploadId=upload,
                       MultipartUpload={"Parts": parts}, **cond)
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=upload)
            except Exception:  # the bucket's lifecycle rules clean it up otherwise
                pass
            raise

    def download_file(self, key, path):
        r = self._call("reading", key, self.client.get_object, Key=self._key(key))
        with open(path, "wb") as fh:
            for chunk in r["Body"].iter_chunks(8 << 20):
                fh.write(chunk)

    def list(self, prefix=""):
        keys = []
        base = self._key("")
        token = None
        while True:
            kwargs = {"Prefix": self._key(prefix)}
            if token:
                kwargs["ContinuationToken"] = token
            r = self._call("listing", prefix, self.client.list_objects_v2, **kwargs)
            keys += [o["Key"][len(base):] for o in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                return sorted(keys)
            token = r["NextContinuationToken"]

    def delete(self, keys):
        for i in range(0, len(keys), 1000):
            batch = [{"Key": self._key(k)} for k in keys[i:i + 1000]]
            if batch:
                self._call("deleting", keys[i], self.client.delete_objects, Delete={"Objects": batch, "Quiet": True})


# --- a local folder ---------------------------------------------------------------------------

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


@STORES.register("s3")
def _s3(url: StoreURL) -> ObjectStore:
    return S3ObjectStore(url)


@STORES.register("file")
def _file(url: StoreURL) -> ObjectStore:
    return LocalObjectStore(Path("/" + url.prefix))
