"""Roots on object storage: ``s3://``, ``gs://`` and ``az://`` trees, listed and read where they live.

A root that is a URL is a bucket (or container) and a prefix; its objects are documents whose
paths are their URLs (``s3://bucket/docs/a.md``). Two operations, one module per backend
(registered in :data:`SOURCES` by scheme, like the other seams):

- **Listing** (:meth:`Source.list`): paginated and streamed, one page (1,000 keys) at a time, each
  object as an :class:`ObjectInfo` — key, size, last-modified and its *identity*, what the
  listing says about its content without reading it: ``etag:<ETag>:<size>`` on S3 (the MD5 of a
  single-part upload, kept by a copy), ``md5:<hex>:<size>`` on GCS and Azure when the service
  keeps an MD5 (a copy keeps it too), else the generation or ETag. Discovery stores the identity
  where a file's sha256 goes, so the planner sorts objects into unchanged (same key, same
  identity: never downloaded), changed, moved (the same identity under a new key: no
  re-embedding) and deleted exactly as it sorts files.
- **Reading** (:func:`fetch`): one GET, streamed into memory up to ``QUARRY_OBJECT_SPILL_MB``
  (16) and into a temporary file past it, refused past ``QUARRY_MAX_FILE_MB`` as a file is. The
  identity stamped on the document is the one the GET answered with, so an object rewritten
  between the listing and the read is stored with the identity of the bytes that were parsed
  (and found unchanged at the next run). Retries with backoff are the SDK's (throttling, 5xx,
  dropped connections); a stream cut mid-body is read again whole, at most :data:`READ_ATTEMPTS`
  times. A batch reads its objects :data:`reads` at a time (``QUARRY_OBJECT_READS``, 8).

Failures are named, never silent: a bucket that does not exist is :class:`BucketMissing` (the
root is ``missing``), a listing that fails is :class:`ListingFailed` (``unreadable``; the deletion
guard keeps the root's documents), an object that cannot be read (403, gone since the listing)
is that object's :class:`~quarry.core.errors.ParseError`. Credentials stay in each SDK
(:mod:`quarry.core.cloud`); messages name URLs and status codes, never a key.

Everything here is a plain function of URLs, so a Dask or Ray worker reads the objects of its
batch itself: only :class:`~quarry.core.models.FileInfo` travels, never bytes.
"""

from __future__ import annotations

import io
import os
import random
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

from quarry.core.environment import environment
from quarry.core.errors import ParseError, QuarryError
from quarry.core.registry import SOURCES
from quarry.core.storeurl import is_source_url

__all__ = [
    "SOURCES",
    "ObjectInfo",
    "Fetched",
    "Source",
    "BucketMissing",
    "ListingFailed",
    "is_object",
    "split_url",
    "object_url",
    "open_source",
    "fetch",
    "fetch_many",
    "open_object",
    "reads",
    "spill_bytes",
    "scrub",
]

READ_ATTEMPTS = 3  # a body cut off mid-stream is read again whole, at most this many times in all
_CHUNK = 1 << 20


class BucketMissing(QuarryError):
    """The bucket or container of a root does not exist."""


class ListingFailed(QuarryError):
    """A root's objects could not be listed (permissions, the network, the service)."""


class TransientRead(Exception):
    """A read cut off mid-body (a dropped connection): worth reading again whole."""


@dataclass(frozen=True)
class ObjectInfo:
    """One object as a listing states it: its key in the bucket, size, last-modified time (epoch
    seconds) and content identity (see the module docstring)."""

    key: str
    size: int
    mtime: float
    identity: str


@dataclass
class Fetched:
    """An object read whole: in ``data``, or spilled to the temporary file ``path`` (which the
    caller removes with :meth:`discard`); ``identity`` as the read answered it; ``metadata``: its
    content type and user metadata."""

    identity: str
    size: int
    metadata: dict[str, str] = field(default_factory=dict)
    data: bytes | None = None
    path: str | None = None

    def open(self):
        """A binary file object over the content."""
        return io.BytesIO(self.data or b"") if self.path is None else open(self.path, "rb")

    def read(self) -> bytes:
        if self.path is None:
            return self.data or b""
        with open(self.path, "rb") as fh:
            return fh.read()

    def discard(self) -> None:
        self.data = None
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self.path = None


class Source:
    """One bucket or container. Backends implement :meth:`list`, :meth:`head` and :meth:`get`."""

    scheme: str = ""

    def __init__(self, bucket: str):
        self.bucket = bucket

    def url(self, key: str) -> str:
        return object_url(self.scheme, self.bucket, key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """The objects whose keys start with ``prefix``, page by page, in key order.
        :class:`BucketMissing` or :class:`ListingFailed` when it cannot."""
        raise NotImplementedError

    def head(self, key: str) -> ObjectInfo | None:
        """The object at ``key`` as a listing would state it, or None (a metadata request, no download)."""
        raise NotImplementedError

    def get(self, key: str, sink) -> tuple[str, int, dict[str, str]]:
        """Stream the object at ``key`` into ``sink.write``; returns ``(identity, size, metadata)`` of what
        was read. :class:`ParseError` naming the cause when it cannot be read; :class:`TransientRead`
        when the stream broke off."""
        raise NotImplementedError


def is_object(path: str) -> bool:
    """Whether ``path`` is the URL of an object (a document of a root on object storage)."""
    return is_source_url(path)


def split_url(url: str) -> tuple[str, str, str]:
    """``s3://bucket/a/b.md`` -> ``("s3", "bucket", "a/b.md")``."""
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    return scheme.lower(), bucket, key


def object_url(scheme: str, bucket: str, key: str) -> str:
    return f"{scheme}://{bucket}/{key}" if key else f"{scheme}://{bucket}"


_sources: dict[tuple, Source] = {}
_sources_guard = threading.Lock()


def open_source(scheme: str, bucket: str) -> Source:
    """The :class:`Source` of ``scheme://bucket`` (one per process, scheme, bucket and environment)."""
    if scheme not in SOURCES:
        raise QuarryError(f"{scheme}:// is not a source quarry reads")
    key = (scheme, bucket, os.getpid(), _environment_key())
    with _sources_guard:
        source = _sources.get(key)
    if source is None:
        source = SOURCES.get(scheme)(bucket)
        with _sources_guard:
            source = _sources.setdefault(key, source)
    return source


def _environment_key() -> int:
    """Changes when the variables that choose an endpoint or an account do (tests switch servers)."""
    names = (
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "STORAGE_EMULATOR_HOST",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURITE_BLOB_STORAGE_URL",
        "AZURE_STORAGE_ENDPOINT",
    )
    return hash(tuple(os.environ.get(n) for n in names))


def cache_dir():
    """Where what was read once is kept by identity (``$QUARRY_CACHE_DIR/sources``)."""
    from pathlib import Path

    base = environment().cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "quarry")
    return Path(base) / "sources"


def reads() -> int:
    """How many objects a batch reads at once (``QUARRY_OBJECT_READS``, default 8)."""
    return environment().object_reads


def spill_bytes() -> int:
    """Objects larger than this are read into a temporary file, not memory (``QUARRY_OBJECT_SPILL_MB``, 16)."""
    return int(environment().object_spill_mb * (1 << 20))


class _Spool:
    """Bytes in memory up to ``spill`` bytes, then in a temporary file; refuses more than ``limit``."""

    def __init__(self, spill: int, limit: int, suffix: str = ""):
        self.spill, self.limit, self.suffix = spill, limit, suffix
        self.parts: list[bytes] = []
        self.size = 0
        self.file: BinaryIO | None = None
        self.path: str | None = None

    def write(self, block) -> int:
        n = len(block)
        self.size += n
        if self.limit and self.size > self.limit:
            raise ParseError(f"file is over the {self.limit >> 20} MB limit (QUARRY_MAX_FILE_MB); skipped")
        if self.file is None and self.size > self.spill:
            fd, self.path = tempfile.mkstemp(prefix="quarry-object-", suffix=self.suffix)
            self.file = os.fdopen(fd, "wb")
            for part in self.parts:
                self.file.write(part)
            self.parts = []
        if self.file is not None:
            self.file.write(block)
        else:
            self.parts.append(bytes(block))
        return n

    def result(self, identity: str, metadata: dict[str, str]) -> Fetched:
        if self.file is not None:
            self.file.close()
            return Fetched(identity, self.size, metadata, path=self.path)
        return Fetched(identity, self.size, metadata, data=b"".join(self.parts))

    def discard(self) -> None:
        if self.file is not None:
            self.file.close()
            assert self.path is not None  # made with the file
            os.unlink(self.path)


def fetch(url: str, limit: int = 0, spill: int | None = None) -> Fetched:
    """Read the object at ``url`` whole (see the module docstring). ``limit``: refuse past this many
    bytes (0: none); ``spill``: bytes kept in memory before the rest goes to a temporary file."""
    scheme, bucket, key = split_url(url)
    source = open_source(scheme, bucket)
    spill = spill_bytes() if spill is None else spill
    suffix = "-" + key.rsplit("/", 1)[-1][-60:]  # the name's suffixes say what an archive is
    for attempt in range(1, READ_ATTEMPTS + 1):
        spool = _Spool(spill, limit, suffix)
        try:
            identity, size, metadata = source.get(key, spool)
        except TransientRead as exc:
            spool.discard()
            if attempt == READ_ATTEMPTS:
                raise ParseError(f"cannot read object: {exc} ({READ_ATTEMPTS} attempts)") from None
            time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random()))
            continue
        except BaseException:
            spool.discard()
            raise
        if size != spool.size:  # the service said one length and sent another
            spool.discard()
            if attempt == READ_ATTEMPTS:
                raise ParseError(f"cannot read object: {spool.size} bytes read of {size}")
            continue
        return spool.result(identity, metadata)
    raise AssertionError("unreachable")


def fetch_many(urls: Iterable[str], limit: int = 0) -> Iterator[tuple[str, Fetched | ParseError]]:
    """``(url, Fetched or the reason it could not be read)`` for each of ``urls``, read
    :func:`reads` at a time, in the order given."""
    urls = list(urls)
    if not urls:
        return

    def one(url: str):
        try:
            return fetch(url, limit)
        except ParseError as exc:
            return exc
        except QuarryError as exc:
            return ParseError(scrub(str(exc)))
        except Exception as exc:  # noqa: BLE001 - an SDK error no backend names: still this object's failure alone
            first = str(exc).strip().splitlines()
            return ParseError(scrub(f"cannot read object: {type(exc).__name__}: {first[0][:300] if first else ''}"))

    with ThreadPoolExecutor(max_workers=min(reads(), len(urls)), thread_name_prefix="quarry-read") as pool:
        yield from zip(urls, pool.map(one, urls))


# What may follow a credential in a URL or a connection string an SDK put into a message.
_SECRET_PARAMS = re.compile(
    r"(?i)((?:^|[?&;\s])(?:sig|signature|x-amz-signature|x-amz-credential"
    r"|x-amz-security-token|sharedaccesssignature|accountkey)=)[^&;\s\"']+"
)
_SECRET_VARS = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
)


def scrub(text: str) -> str:
    """``text`` without the credentials of the environment or a signature in a URL it may quote."""
    for var in _SECRET_VARS:
        value = os.environ.get(var)
        if value and len(value) >= 8:
            text = text.replace(value, "***")
    return _SECRET_PARAMS.sub(r"\1***", text)


@contextmanager
def open_object(url: str):
    """``(binary file object, identity)`` of the object at ``url`` for the block (an archive being
    listed or read: spilled to a temporary file past :func:`spill_bytes`, removed afterwards)."""
    fetched = fetch(url)
    try:
        with fetched.open() as fh:
            yield fh, fetched.identity
    finally:
        fetched.discard()


def object_metadata(content_type: str | None, user: dict | None) -> dict[str, str]:
    """An object's metadata as ``metadata.*`` keys: ``content_type`` and each user metadata key
    (lower-cased, as S3 and GCS keep them; characters a filter cannot name become ``_``)."""
    out: dict[str, str] = {}
    if content_type:
        out["content_type"] = str(content_type)
    for name, value in (user or {}).items():
        key = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(name).lower())
        if key and value is not None:
            out[key] = str(value)
    return out
