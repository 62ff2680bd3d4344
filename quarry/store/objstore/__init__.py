"""Object storage under a store URL: the few operations the commit protocol needs.

One module per backend, each registering itself: ``s3://bucket/prefix`` (:mod:`.s3`) goes through boto3, which reads the endpoint and the credentials from the
standard AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_DEFAULT_REGION``); ``az://container/prefix`` through azure-storage-blob
(:mod:`quarry.store.objstore.azure`); ``file:///path`` (:mod:`.local`) is a local folder with the same semantics, for tests and
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

import builtins
from pathlib import Path

from quarry.core.registry import STORES
from quarry.core.storeurl import StoreURL

MULTIPART_BYTES = 64 << 20  # objects above this go up in parts of this size


class PreconditionFailed(Exception):
    """A conditional put lost: the key exists (put_if_absent) or changed (put_if_match)."""


def open_objects(url: StoreURL) -> ObjectStore:
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

    def delete(self, keys: builtins.list[str]) -> None:  # `list` here is the method above
        """Delete ``keys``; missing keys are not an error."""
        raise NotImplementedError

    def lance_options(self) -> dict[str, str] | None:
        """LanceDB ``storage_options`` naming the same account, or None: LanceDB reads the environment."""
        return None
