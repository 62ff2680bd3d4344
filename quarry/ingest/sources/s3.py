"""``s3://bucket/prefix`` roots (and S3-compatible servers) through boto3.

Listing is ``ListObjectsV2`` through boto3's paginator, 1,000 keys a page, consumed page by page.
An object's identity is its ETag with its size: the MD5 of the bytes for a single-part upload, so
an unchanged re-upload and a ``CopyObject`` under a new key keep it (a move is detected); a
multipart upload's ETag depends on its part size, so such an object copied elsewhere is seen as
new there (parsed again; its vectors are still reused by text). A read is one ``GetObject``
streamed in 1 MiB blocks: S3 serves one version of an object to one request, so the bytes, the
ETag and the metadata belong together.
"""

from __future__ import annotations

from quarry.core.cloud import s3_client
from quarry.core.errors import ParseError
from quarry.ingest.sources import (
    SOURCES,
    BucketMissing,
    ListingFailed,
    ObjectInfo,
    Source,
    TransientRead,
    object_metadata,
)

__all__ = ["S3Source"]


def identity(etag: str, size: int) -> str:
    return f"etag:{str(etag).strip(chr(34))}:{size}"


def _code(exc) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _status(exc) -> int:
    return int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _why(exc) -> str:
    """A ClientError as ``403 AccessDenied (Access Denied)``; a BotoCoreError as its class and message."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message", "")
        return f"{_status(exc) or ''} {_code(exc)}".strip() + (f" ({message})" if message else "")
    return f"{type(exc).__name__}: {exc}; check the AWS_* environment (endpoint, region, credentials)"


class S3Source(Source):
    scheme = "s3"

    def __init__(self, bucket: str):
        super().__init__(bucket)
        self.client = s3_client()

    def list(self, prefix):
        from botocore.exceptions import BotoCoreError, ClientError

        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": 1000}
        )
        try:
            for page in pages:
                for o in page.get("Contents", ()):
                    yield ObjectInfo(
                        o["Key"],
                        int(o["Size"]),
                        o["LastModified"].timestamp(),
                        identity(o.get("ETag", ""), int(o["Size"])),
                    )
        except ClientError as exc:
            if _code(exc) == "NoSuchBucket":
                raise BucketMissing(f"bucket {self.bucket!r} does not exist") from None
            raise ListingFailed(f"cannot list it: {_why(exc)}") from None
        except BotoCoreError as exc:
            raise ListingFailed(f"cannot list it: {_why(exc)}") from None

    def head(self, key):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            r = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == 404 or _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            if _code(exc) == "NoSuchBucket":
                raise BucketMissing(f"bucket {self.bucket!r} does not exist") from None
            raise ListingFailed(f"cannot read {self.url(key)}: {_why(exc)}") from None
        except BotoCoreError as exc:
            raise ListingFailed(f"cannot read {self.url(key)}: {_why(exc)}") from None
        size = int(r.get("ContentLength", 0))
        return ObjectInfo(key, size, r["LastModified"].timestamp(), identity(r.get("ETag", ""), size))

    def get(self, key, sink):
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionClosedError,
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        try:
            r = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404") or _status(exc) == 404:
                raise ParseError("object disappeared before it could be read (404 NoSuchKey)") from None
            raise ParseError(f"cannot read object: {_why(exc)}") from None
        except BotoCoreError as exc:
            raise ParseError(f"cannot read object: {_why(exc)}") from None
        body = r["Body"]
        try:
            for block in body.iter_chunks(1 << 20):
                sink.write(block)
        except (ResponseStreamingError, IncompleteReadError, ReadTimeoutError, ConnectionClosedError) as exc:
            raise TransientRead(f"{type(exc).__name__}: {exc}") from None
        finally:
            body.close()
        size = int(r.get("ContentLength", 0))
        return identity(r.get("ETag", ""), size), size, object_metadata(r.get("ContentType"), r.get("Metadata"))


@SOURCES.register("s3")
def _s3(bucket: str) -> S3Source:
    return S3Source(bucket)
