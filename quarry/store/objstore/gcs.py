"""``gs://bucket/prefix``: the object-store primitives on Google Cloud Storage.

GCS's JSON API makes a write conditional on a *generation*: every write of an object gives it a
new generation number, and a write can require the current one (``ifGenerationMatch``). The
generation plays the etag's part here, as a decimal string:

- create-only (:meth:`put_if_absent`, :meth:`upload_file`): ``ifGenerationMatch=0``, "no live
  object";
- replace-if-unchanged (:meth:`put_if_match`): ``ifGenerationMatch=<generation read>``; GCS also
  answers 412 when the object is gone, as the protocol wants.

A failed precondition is HTTP 412, raised as :class:`PreconditionFailed`. Files above
``objstore.MULTIPART_BYTES`` go up as a resumable upload in parts of that size, the precondition
sent when the upload starts (Google's storage-testbench checks it then and again at the last part).

Credentials and endpoint come from the standard Google environment, read by google-auth and
google-cloud-storage themselves: Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``,
``gcloud auth application-default login``, or the metadata server on Google Cloud),
``GOOGLE_CLOUD_PROJECT``, and ``STORAGE_EMULATOR_HOST`` for an emulator (then the client sends no
credentials). Errors name the URL and the HTTP status, never a credential.
"""

from __future__ import annotations

import os

from quarry.core.cloud import gcs_client
from quarry.core.errors import QuarryError, UsageError
from quarry.core.registry import STORES
from quarry.core.storeurl import StoreURL
from quarry.store import objstore
from quarry.store.objstore import ObjectStore, PreconditionFailed

__all__ = ["GCSObjectStore", "gcs_client"]

RETRY_SECONDS = 60.0  # how long transient errors (5xx, 429, connection drops) are retried, with backoff


def _generation(blob) -> str:
    return str(blob.generation)


class GCSObjectStore(ObjectStore):
    def __init__(self, url: StoreURL):
        self.url = url
        try:
            self.client = gcs_client()
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - no Application Default Credentials, a damaged key file
            raise QuarryError(
                f"opening {url} failed: {type(exc).__name__}: {_first_line(exc)}; check the Google "
                "environment (GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_CLOUD_PROJECT, "
                "STORAGE_EMULATOR_HOST)"
            ) from None
        self.bucket = self.client.bucket(url.bucket)

    def _key(self, key: str) -> str:
        return f"{self.url.prefix}/{key}" if self.url.prefix else key

    def _call(self, what: str, key: str, fn, *args, **kwargs):
        from google.api_core import exceptions as gexc

        if "retry" not in kwargs:
            from google.cloud.storage.retry import DEFAULT_RETRY

            kwargs["retry"] = DEFAULT_RETRY.with_timeout(RETRY_SECONDS)
        try:
            return fn(*args, **kwargs)
        except gexc.PreconditionFailed:
            raise PreconditionFailed(f"{self.url.join(key)}: 412") from None
        except gexc.NotFound as exc:
            if what in ("reading", "deleting"):
                raise FileNotFoundError(self.url.join(key)) from None
            # a write or a listing finds no bucket (GCS answers 412, not 404, for a missing object)
            raise QuarryError(
                f"{what} {self.url.join(key)} failed: 404 ({_reason(exc)}): does bucket {self.url.bucket} exist?"
            ) from None
        except gexc.GoogleAPICallError as exc:
            raise QuarryError(f"{what} {self.url.join(key)} failed: {exc.code} ({_reason(exc)})") from None
        except Exception as exc:
            if not _from_the_client(exc):
                raise  # a local file that cannot be read or written: as on a local store
            # no endpoint, refused or missing credentials, a timeout: the class and its first line
            raise QuarryError(
                f"{what} {self.url.join(key)} failed: {type(exc).__name__}: {_first_line(exc)}; "
                "check the Google environment (credentials, STORAGE_EMULATOR_HOST)"
            ) from None

    def get(self, key):
        blob = self.bucket.blob(self._key(key))
        try:
            data = self._call("reading", key, blob.download_as_bytes)
        except FileNotFoundError:
            return None
        if blob.generation is None:  # a server that sends no x-goog-generation: ask for it
            got = self._call("reading", key, self.bucket.get_blob, self._key(key))
            if got is None:
                return None
            blob = got
        return data, _generation(blob)

    def _upload(self, key: str, data: bytes, **cond) -> str:
        blob = self.bucket.blob(self._key(key))
        # Conditional puts are retried like the rest: a retry of a put that landed but whose answer
        # was lost fails its condition against its own write, and the callers (Remote.commit, the
        # lease) read the object back to tell that from a lost race.
        self._call("writing", key, blob.upload_from_string, data, content_type="application/octet-stream", **cond)
        return _generation(blob)

    def put(self, key, data):
        return self._upload(key, data)

    def put_if_absent(self, key, data):
        return self._upload(key, data, if_generation_match=0)

    def put_if_match(self, key, data, etag):
        try:
            generation = int(etag)
        except (TypeError, ValueError):
            raise PreconditionFailed(f"{self.url.join(key)}: {etag!r} is no GCS generation") from None
        return self._upload(key, data, if_generation_match=generation)  # a deleted object: 412 as well

    def upload_file(self, key, path, if_absent=True):
        size = os.path.getsize(path)
        # Parts must be multiples of 256 KiB; above the threshold the upload is resumable.
        chunk = max(256 << 10, objstore.MULTIPART_BYTES // (256 << 10) * (256 << 10))
        blob = self.bucket.blob(self._key(key), chunk_size=chunk if size > objstore.MULTIPART_BYTES else None)
        cond = {"if_generation_match": 0} if if_absent else {}
        self._call(
            "uploading", key, blob.upload_from_filename, str(path), content_type="application/octet-stream", **cond
        )

    def download_file(self, key, path):
        blob = self.bucket.blob(self._key(key))
        self._call("reading", key, blob.download_to_filename, str(path))

    def list(self, prefix=""):
        base = self._key("")
        blobs = self._call(
            "listing",
            prefix,
            lambda retry: list(self.client.list_blobs(self.bucket, prefix=self._key(prefix), retry=retry)),
        )
        return sorted(b.name[len(base) :] for b in blobs)

    def delete(self, keys):
        for key in keys:
            try:
                self._call("deleting", key, self.bucket.blob(self._key(key)).delete)
            except FileNotFoundError:
                pass


def _from_the_client(exc: BaseException) -> bool:
    """Whether ``exc`` comes from the HTTP or auth layers (requests, urllib3, google-auth, the client)."""
    import requests

    if isinstance(exc, requests.RequestException):
        return True
    return type(exc).__module__.split(".")[0] in ("google", "urllib3", "requests")


def _reason(exc) -> str:
    errors = getattr(exc, "errors", None) or []
    for e in errors:
        if isinstance(e, dict) and e.get("message"):
            return _first_line(e["message"])
    return _first_line(getattr(exc, "message", "") or exc)


def _first_line(value) -> str:
    text = str(value).strip().splitlines()
    return text[0][:300] if text else ""


@STORES.register("gs")
def _gs(url: StoreURL) -> ObjectStore:
    return GCSObjectStore(url)
