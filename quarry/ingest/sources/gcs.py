"""``gs://bucket/prefix`` roots through google-cloud-storage (``pip install 'quarry[gcs]'``).

Listing is the JSON API's ``objects.list``, 1,000 objects a page, consumed as the client's
iterator fetches them. An object's identity is its MD5 with its size (GCS keeps an MD5 for every
object that is not a composite, and a rewrite or copy keeps it: a move is detected), else its
CRC32C. A read asks for the object's metadata (generation, MD5, content type, user metadata),
then downloads that generation (``ifGenerationMatch``): an object rewritten between the two is
read again whole, so the bytes and the identity always belong together. Every call is retried
with the client's backoff for ``RETRY_SECONDS``.
"""

from __future__ import annotations

import base64

from quarry.core.cloud import gcs_client
from quarry.core.errors import ParseError, QuarryError
from quarry.ingest.sources import (
    SOURCES,
    BucketMissing,
    ListingFailed,
    ObjectInfo,
    Source,
    TransientRead,
    object_metadata,
)

__all__ = ["GCSSource"]

RETRY_SECONDS = 60.0


def identity(blob) -> str:
    size = int(blob.size or 0)
    if blob.md5_hash:
        return f"md5:{base64.b64decode(blob.md5_hash).hex()}:{size}"
    if blob.crc32c:
        return f"crc32c:{base64.b64decode(blob.crc32c).hex()}:{size}"
    return f"generation:{blob.generation}:{size}"


def _retry():
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_timeout(RETRY_SECONDS)


def _why(exc) -> str:
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.GoogleAPICallError):
        message = str(getattr(exc, "message", "") or "").strip().splitlines()
        return f"{exc.code} {type(exc).__name__}" + (f" ({message[0][:300]})" if message else "")
    first = str(exc).strip().splitlines()
    return (
        f"{type(exc).__name__}: {first[0][:300] if first else ''}; check the Google environment "
        "(credentials, STORAGE_EMULATOR_HOST)"
    )


def _client_error(exc) -> bool:
    """Whether ``exc`` comes from the client, its HTTP or its auth layers (not quarry's own code)."""
    import requests

    return isinstance(exc, requests.RequestException) or type(exc).__module__.split(".")[0] in (
        "google",
        "urllib3",
        "requests",
    )


class GCSSource(Source):
    scheme = "gs"

    def __init__(self, bucket: str):
        super().__init__(bucket)
        try:
            self.client = gcs_client()
        except QuarryError:
            raise
        except Exception as exc:  # noqa: BLE001 - no Application Default Credentials, a damaged key file
            raise QuarryError(f"opening gs://{bucket} failed: {_why(exc)}") from None
        self.handle = self.client.bucket(bucket)

    def _info(self, blob) -> ObjectInfo:
        return ObjectInfo(
            blob.name, int(blob.size or 0), blob.updated.timestamp() if blob.updated else 0.0, identity(blob)
        )

    def list(self, prefix):
        from google.api_core import exceptions as gexc

        try:
            for blob in self.client.list_blobs(self.handle, prefix=prefix or None, page_size=1000, retry=_retry()):
                yield self._info(blob)
        except gexc.NotFound:
            raise BucketMissing(f"bucket {self.bucket!r} does not exist") from None
        except Exception as exc:
            if not _client_error(exc):
                raise
            raise ListingFailed(f"cannot list it: {_why(exc)}") from None

    def head(self, key):
        from google.api_core import exceptions as gexc

        try:
            blob = self.handle.get_blob(key, retry=_retry())
        except gexc.NotFound:
            return None
        except Exception as exc:
            if not _client_error(exc):
                raise
            raise ListingFailed(f"cannot read {self.url(key)}: {_why(exc)}") from None
        return None if blob is None else self._info(blob)

    def get(self, key, sink):
        from google.api_core import exceptions as gexc

        try:
            blob = self.handle.get_blob(key, retry=_retry())
            if blob is None:
                raise ParseError("object disappeared before it could be read (404)")
            blob.download_to_file(sink, if_generation_match=blob.generation, retry=_retry())
        except (gexc.PreconditionFailed, gexc.NotFound):
            # rewritten or deleted between the metadata and the download: read it again whole
            raise TransientRead("the object changed while it was read") from None
        except ParseError:
            raise
        except Exception as exc:
            if not _client_error(exc):
                raise
            raise ParseError(f"cannot read object: {_why(exc)}") from None
        return identity(blob), int(blob.size or 0), object_metadata(blob.content_type, blob.metadata)


@SOURCES.register("gs")
def _gs(bucket: str) -> GCSSource:
    return GCSSource(bucket)
