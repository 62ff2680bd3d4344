"""``az://container/prefix`` roots through azure-storage-blob (``pip install 'quarry[azure]'``).

The account comes from the standard Azure environment, resolved as for stores
(:func:`quarry.core.cloud.account_from_env`). Listing is ``List Blobs``, 1,000 blobs a page,
consumed as the SDK's pager fetches them. A blob's identity is its Content-MD5 with its size when
the service keeps one (a blob put whole; a copy keeps it: a move is detected), else its ETag. A
read is one ``download_blob``: the SDK reads a large blob in ranges, each after the first
conditioned on the first one's ETag, so a blob rewritten mid-read fails the read, which is then
read again whole. Keys and SAS tokens are scrubbed from every message.
"""

from __future__ import annotations

from quarry.core.cloud import account_from_env, blob_service
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

__all__ = ["AzureSource"]


def identity(props) -> str:
    size = int(props.size or 0)
    md5 = getattr(props.content_settings, "content_md5", None)
    if md5:
        return f"md5:{bytes(md5).hex()}:{size}"
    return f"etag:{str(props.etag).strip(chr(34))}:{size}"


def _code(exc) -> str:
    code = getattr(exc, "error_code", None) or ""
    return str(getattr(code, "value", code))


class AzureSource(Source):
    scheme = "az"

    def __init__(self, bucket: str):
        super().__init__(bucket)
        self.account = account_from_env()
        self.container = blob_service(self.account).get_container_client(bucket)

    def _scrub(self, text: str) -> str:
        for secret in self.account.secrets():
            text = text.replace(secret, "***")
        return text

    def _why(self, exc) -> str:
        from azure.core.exceptions import HttpResponseError

        if isinstance(exc, HttpResponseError):
            hint = "; check the AZURE_STORAGE_* credentials" if exc.status_code in (401, 403) else ""
            return self._scrub(f"{exc.status_code} {_code(exc)} ({exc.reason}){hint}")
        first = str(exc).strip().splitlines()
        return self._scrub(
            f"{type(exc).__name__}: {first[0][:300] if first else ''}; check the AZURE_STORAGE_* "
            f"environment (endpoint {self.account.endpoint}, credentials)"
        )

    def _missing(self, exc) -> bool:
        return _code(exc) == "ContainerNotFound"

    def list(self, prefix):
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        try:
            for props in self.container.list_blobs(name_starts_with=prefix or None, results_per_page=1000):
                yield ObjectInfo(
                    props.name,
                    int(props.size or 0),
                    props.last_modified.timestamp() if props.last_modified else 0.0,
                    identity(props),
                )
        except ResourceNotFoundError as exc:
            if self._missing(exc):
                raise BucketMissing(
                    f"container {self.bucket!r} does not exist in storage account {self.account.name!r}"
                ) from None
            raise ListingFailed(f"cannot list it: {self._why(exc)}") from None
        except AzureError as exc:
            raise ListingFailed(f"cannot list it: {self._why(exc)}") from None

    def head(self, key):
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        try:
            props = self.container.get_blob_client(key).get_blob_properties()
        except ResourceNotFoundError as exc:
            if self._missing(exc):
                raise BucketMissing(
                    f"container {self.bucket!r} does not exist in storage account {self.account.name!r}"
                ) from None
            return None
        except AzureError as exc:
            raise ListingFailed(f"cannot read {self.url(key)}: {self._why(exc)}") from None
        return ObjectInfo(
            key, int(props.size or 0), props.last_modified.timestamp() if props.last_modified else 0.0, identity(props)
        )

    def get(self, key, sink):
        from azure.core.exceptions import (
            AzureError,
            IncompleteReadError,
            ResourceModifiedError,
            ResourceNotFoundError,
            ServiceResponseError,
        )

        try:
            stream = self.container.get_blob_client(key).download_blob(max_concurrency=1)
            for block in stream.chunks():
                sink.write(block)
        except ResourceNotFoundError:
            raise ParseError("object disappeared before it could be read (404 BlobNotFound)") from None
        except ResourceModifiedError:
            raise TransientRead("the blob changed while it was read") from None
        except (IncompleteReadError, ServiceResponseError) as exc:
            raise TransientRead(self._why(exc)) from None
        except AzureError as exc:
            raise ParseError(f"cannot read object: {self._why(exc)}") from None
        props = stream.properties
        return (
            identity(props),
            int(props.size or 0),
            object_metadata(props.content_settings.content_type, props.metadata),
        )


@SOURCES.register("az")
def _az(bucket: str) -> AzureSource:
    return AzureSource(bucket)
