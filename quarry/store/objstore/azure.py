"""``az://container/prefix``: the object-store primitives on Azure Blob Storage (azure-storage-blob).

The two conditional puts of the commit protocol map onto Blob Storage's own headers:

- :meth:`AzureObjectStore.put_if_absent` — ``Put Blob`` with ``If-None-Match: *``; an existing
  blob answers 409 ``BlobAlreadyExists``;
- :meth:`AzureObjectStore.put_if_match` — ``Put Blob`` with ``If-Match: <ETag>``; a changed or
  missing blob answers 412 ``ConditionNotMet``.

Large files go up as blocks (``Put Block``), and the create-only condition rides on the final
``Put Block List``, which is what makes the blob exist.

The account, endpoint and credentials come from the standard Azure environment, resolved once by
:func:`quarry.core.cloud.account_from_env` for both quarry's client and LanceDB (which reads the ``AZURE_*``
variables through Rust's object_store but knows no connection string), so the two always talk to
the same account:

- ``AZURE_STORAGE_CONNECTION_STRING``; or
- ``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY`` (or ``AZURE_STORAGE_SAS_TOKEN``),
  at ``AZURE_STORAGE_ENDPOINT`` when set, else ``https://<account>.blob.core.windows.net``; or
- ``AZURE_STORAGE_USE_EMULATOR=true``: Azurite at ``AZURITE_BLOB_STORAGE_URL``
  (``http://127.0.0.1:10000``), account ``devstoreaccount1`` and its published key unless the
  two variables above name others.

Errors name the blob's URL and the service's error code; keys and tokens are scrubbed from any
message, and the SDK's request logging stays off.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from quarry.core.cloud import EMULATOR_ACCOUNT, EMULATOR_KEY, EMULATOR_URL, AzureAccount, account_from_env, blob_service  # noqa: F401  (re-exported)
from quarry.core.errors import QuarryError
from quarry.core.registry import STORES
from quarry.core.storeurl import StoreURL
from quarry.store import objstore
from quarry.store.objstore import ObjectStore, PreconditionFailed

_PRECONDITION_CODES = ("BlobAlreadyExists", "ConditionNotMet")


class AzureObjectStore(ObjectStore):
    """Blobs of one container under one prefix (``az://container/prefix``)."""

    def __init__(self, url: StoreURL, account: AzureAccount | None = None):
        self.url = url
        self.account = account or account_from_env()
        self.container = blob_service(self.account).get_container_client(url.bucket)

    def lance_options(self) -> dict[str, str]:
        return self.account.lance_options()

    def _key(self, key: str) -> str:
        return f"{self.url.prefix}/{key}" if self.url.prefix else key

    def _blob(self, key: str):
        return self.container.get_blob_client(self._key(key))

    def _scrub(self, text: str) -> str:
        for secret in self.account.secrets():
            text = text.replace(secret, "***")
        return text

    def _call(self, what: str, key: str, fn, *args, **kwargs):
        from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

        try:
            return fn(*args, **kwargs)
        except ResourceNotFoundError as exc:
            if _code(exc) == "ContainerNotFound":
                raise QuarryError(
                    f"{what} {self.url.join(key)} failed: container {self.url.bucket!r} does not exist "
                    f"in storage account {self.account.name!r}: create it first"
                ) from None
            raise FileNotFoundError(self.url.join(key)) from None
        except HttpResponseError as exc:
            code = _code(exc)
            if exc.status_code == 412 or code in _PRECONDITION_CODES:
                raise PreconditionFailed(f"{self.url.join(key)}: {code or exc.status_code}") from None
            hint = "; check the AZURE_STORAGE_* credentials" if exc.status_code in (401, 403) else ""
            raise QuarryError(
                self._scrub(f"{what} {self.url.join(key)} failed: {exc.status_code} {code} ({exc.reason}){hint}")
            ) from None
        except AzureError as exc:  # no endpoint, a timeout, a bad credential: the class and its message
            raise QuarryError(
                self._scrub(
                    f"{what} {self.url.join(key)} failed: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}; check the AZURE_STORAGE_* "
                    f"environment (endpoint {self.account.endpoint}, credentials)"
                )
            ) from None

    def get(self, key):
        try:
            stream = self._call("reading", key, self._blob(key).download_blob)
        except FileNotFoundError:
            return None
        return self._call("reading", key, stream.readall), stream.properties.etag

    def put(self, key, data):
        return self._call("writing", key, self._blob(key).upload_blob, data, overwrite=True)["etag"]

    def put_if_absent(self, key, data):
        from azure.core import MatchConditions

        return self._call(
            "writing", key, self._blob(key).upload_blob, data, overwrite=True, match_condition=MatchConditions.IfMissing
        )["etag"]

    def put_if_match(self, key, data, etag):
        from azure.core import MatchConditions

        try:
            return self._call(
                "writing",
                key,
                self._blob(key).upload_blob,
                data,
                overwrite=True,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )["etag"]
        except FileNotFoundError:  # a blob that is gone fails the condition too
            raise PreconditionFailed(self.url.join(key)) from None

    def upload_file(self, key, path, if_absent=True):
        from azure.core import MatchConditions

        cond = {"match_condition": MatchConditions.IfMissing} if if_absent else {}
        blob = self._blob(key)
        block_bytes = objstore.MULTIPART_BYTES
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            if size <= block_bytes:
                self._call("uploading", key, blob.upload_blob, fh.read(), overwrite=True, **cond)
                return
            # Blocks stay uncommitted (invisible, collected by the service after a week) until the block
            # list names them; ids unique to this upload keep two uploaders of one name apart.
            token = uuid.uuid4().hex
            ids: list[str] = []
            while chunk := fh.read(block_bytes):
                block = base64.b64encode(f"{token}-{len(ids):06d}".encode()).decode()
                self._call("uploading", key, blob.stage_block, block, chunk, length=len(chunk))
                ids.append(block)
        self._call("uploading", key, blob.commit_block_list, ids, **cond)

    def download_file(self, key, path):
        stream = self._call("reading", key, self._blob(key).download_blob, max_concurrency=2)
        with open(Path(path), "wb") as fh:
            self._call("reading", key, stream.readinto, fh)

    def list(self, prefix=""):
        base = len(self._key(""))
        pager = self.container.list_blobs(name_starts_with=self._key(prefix))
        return sorted(self._call("listing", prefix, lambda: [b.name[base:] for b in pager]))

    def delete(self, keys):
        for key in keys:
            try:
                self._call("deleting", key, self._blob(key).delete_blob)
            except FileNotFoundError:
                pass


def _code(exc) -> str:
    code = getattr(exc, "error_code", None) or ""
    return str(getattr(code, "value", code))


@STORES.register("az")
def _az(url: StoreURL) -> ObjectStore:
    return AzureObjectStore(url)
