"""Clients of the object stores, from each cloud's standard environment.

One place builds the SDK clients that both the stores on object storage (:mod:`quarry.store.objstore`
and its siblings) and the roots on object storage (:mod:`quarry.ingest.sources`) use, so that a
store and a tree in the same account see the same endpoint and credentials, and quarry itself
never reads or keeps a secret beyond handing it to the SDK:

- ``s3``: boto3, from the AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_PROFILE`` …), standard retry mode;
- ``gs``: google-cloud-storage, from Application Default Credentials, ``GOOGLE_CLOUD_PROJECT`` and
  ``STORAGE_EMULATOR_HOST``;
- ``az``: azure-storage-blob, from the account :func:`account_from_env` resolves (below).

Each client is made once per process and per environment that shapes it (endpoint, region, a
fingerprint of the credential), so a test or a program that switches accounts gets a new one.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from quarry.core.errors import UsageError

if TYPE_CHECKING:
    from azure.storage.blob import BlobServiceClient

__all__ = [
    "s3_client",
    "gcs_client",
    "gcs_storage",
    "AzureAccount",
    "account_from_env",
    "blob_service",
    "EMULATOR_ACCOUNT",
    "EMULATOR_KEY",
    "EMULATOR_URL",
]

# the SDK clients by what shapes them (boto3's and google-cloud-storage's are untyped)
_clients: dict[tuple[str | int | None, ...], Any] = {}
_guard = threading.Lock()


def _fingerprint(*secrets: str | None) -> str:
    return hashlib.sha256("\0".join(s or "" for s in secrets).encode()).hexdigest()[:16]


# --- S3 ---------------------------------------------------------------------------------------


def s3_client() -> Any:
    """A boto3 S3 client configured from the AWS environment (one per process, endpoint and credential)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - boto3 is in the default install
        raise UsageError("s3:// needs boto3: pip install boto3") from exc
    # boto3 reads AWS_ENDPOINT_URL itself; AWS_ENDPOINT is the name object_store (LanceDB) also reads.
    endpoint = (
        os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or os.environ.get("AWS_ENDPOINT")
        or None
    )
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or None
    key = (
        "s3",
        endpoint,
        region,
        os.environ.get("AWS_PROFILE"),
        _fingerprint(
            os.environ.get("AWS_ACCESS_KEY_ID"),
            os.environ.get("AWS_SECRET_ACCESS_KEY"),
            os.environ.get("AWS_SESSION_TOKEN"),
        ),
        os.getpid(),
    )
    with _guard:
        client = _clients.get(key)
        if client is None:
            # 5 attempts with backoff (standard mode: throttling, 5xx, dropped connections); a pool
            # wide enough for the concurrent reads of a batch (quarry.ingest.sources).
            config = Config(
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=32,
                s3={"addressing_style": "path"} if endpoint else None,
            )
            client = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=region, config=config)
            _clients[key] = client
        return client


# --- Google Cloud Storage ---------------------------------------------------------------------


def gcs_storage() -> ModuleType:
    """The ``google.cloud.storage`` module, or :class:`UsageError` saying what to install."""
    try:
        return importlib.import_module("google.cloud.storage")
    except ImportError as exc:
        raise UsageError("gs:// needs google-cloud-storage: pip install 'quarry[gcs]'") from exc


def gcs_client() -> Any:
    """A google-cloud-storage client from the Google environment (one per process and endpoint)."""
    storage = gcs_storage()
    emulator = os.environ.get("STORAGE_EMULATOR_HOST") or None
    project = os.environ.get("GOOGLE_CLOUD_PROJECT") or None
    key = ("gs", emulator, project, os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"), os.getpid())
    with _guard:
        client = _clients.get(key)
        if client is None:
            # With STORAGE_EMULATOR_HOST set the client itself uses anonymous credentials.
            client = storage.Client(project=project)
            _clients[key] = client
        return client


# --- Azure Blob Storage -----------------------------------------------------------------------

EMULATOR_ACCOUNT = "devstoreaccount1"
# Azurite's well-known key, published in its documentation: it guards nothing.
EMULATOR_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
EMULATOR_URL = "http://127.0.0.1:10000"
_TRUE = ("1", "true", "yes", "on", "y")


@dataclass(frozen=True)
class AzureAccount:
    """Where and as whom: the blob endpoint of one storage account and its key or SAS token."""

    name: str
    endpoint: str  # the account's blob URL, e.g. https://acct.blob.core.windows.net or http://127.0.0.1:10000/acct
    key: str | None = field(default=None, repr=False)
    sas: str | None = field(default=None, repr=False)

    def secrets(self) -> list[str]:
        return [s for s in (self.key, self.sas) if s]

    def lance_options(self) -> dict[str, str]:
        """The same account as LanceDB's ``storage_options`` (object_store's Azure keys)."""
        # The endpoint is always explicit and the emulator switch always off: with the switch on,
        # object_store ignores the endpoint for AZURITE_BLOB_STORAGE_URL. Left to the environment, a
        # connection in the test suite went to Azurite's default port although the switch had been
        # unset since an earlier connection in the same process had it set.
        opts = {
            "azure_storage_account_name": self.name,
            "azure_storage_endpoint": self.endpoint,
            "azure_storage_use_emulator": "false",
        }
        if self.key:
            opts["azure_storage_account_key"] = self.key
        elif self.sas:
            opts["azure_storage_sas_key"] = self.sas
        if self.endpoint.startswith("http://"):
            opts["allow_http"] = "true"  # object_store refuses plain HTTP otherwise (Azurite)
        return opts


def _connection_string(text: str) -> AzureAccount:
    parts: dict[str, str] = {}
    for item in text.split(";"):
        name, sep, value = item.strip().partition("=")
        if sep:
            parts[name.strip().lower()] = value.strip()
    if parts.get("usedevelopmentstorage", "").lower() in _TRUE:
        return AzureAccount(EMULATOR_ACCOUNT, f"{EMULATOR_URL}/{EMULATOR_ACCOUNT}", key=EMULATOR_KEY)
    name = parts.get("accountname", "")
    endpoint = parts.get("blobendpoint") or (
        name
        and "{}://{}.blob.{}".format(
            parts.get("defaultendpointsprotocol", "https"), name, parts.get("endpointsuffix", "core.windows.net")
        )
    )
    key, sas = parts.get("accountkey"), parts.get("sharedaccesssignature")
    if not name and endpoint:  # a SAS connection string: the account is in the endpoint
        parsed = urlsplit(endpoint)
        name = parsed.path.strip("/").split("/")[0] or (parsed.hostname or "").split(".")[0]
    if not (name and endpoint and (key or sas)):
        raise UsageError(
            "AZURE_STORAGE_CONNECTION_STRING names no account, blob endpoint and key or "
            "SharedAccessSignature: copy it whole from the storage account's access keys"
        )
    return AzureAccount(name, endpoint.rstrip("/"), key=key, sas=sas and sas.lstrip("?"))


def account_from_env(env: Mapping[str, str] | None = None) -> AzureAccount:
    """The storage account the ``AZURE_*`` environment names (module docstring)."""
    env = os.environ if env is None else env
    if env.get("AZURE_STORAGE_CONNECTION_STRING"):
        return _connection_string(env["AZURE_STORAGE_CONNECTION_STRING"])
    name = env.get("AZURE_STORAGE_ACCOUNT_NAME", "")
    key = env.get("AZURE_STORAGE_ACCOUNT_KEY") or env.get("AZURE_STORAGE_ACCESS_KEY")
    sas = (env.get("AZURE_STORAGE_SAS_TOKEN") or env.get("AZURE_STORAGE_SAS_KEY") or "").lstrip("?") or None
    if env.get("AZURE_STORAGE_USE_EMULATOR", "").lower() in _TRUE:
        name = name or EMULATOR_ACCOUNT
        url = (env.get("AZURITE_BLOB_STORAGE_URL") or EMULATOR_URL).rstrip("/")
        return AzureAccount(name, f"{url}/{name}", key=key or (None if sas else EMULATOR_KEY), sas=sas)
    if not name or not (key or sas):
        raise UsageError(
            "az:// stores need an Azure storage account: set AZURE_STORAGE_CONNECTION_STRING, or "
            "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN "
            "(AZURE_STORAGE_USE_EMULATOR=true for Azurite)"
        )
    endpoint = env.get("AZURE_STORAGE_ENDPOINT") or env.get("AZURE_ENDPOINT") or f"https://{name}.blob.core.windows.net"
    return AzureAccount(name, endpoint.rstrip("/"), key=key, sas=sas)


def blob_service(account: AzureAccount) -> BlobServiceClient:
    """A ``BlobServiceClient`` for ``account`` (one per process, endpoint and credential)."""
    try:
        from azure.storage.blob import BlobServiceClient, ExponentialRetry
    except ImportError as exc:
        raise UsageError("az:// stores need azure-storage-blob: pip install 'quarry[azure]'") from exc
    # The request log would print a line per blob at INFO; the SDK redacts signatures, but keep it quiet.
    logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)
    fingerprint = hashlib.sha256("\0".join(account.secrets()).encode()).hexdigest()
    cache_key = ("az", account.name, account.endpoint, fingerprint, os.getpid())
    with _guard:
        client: BlobServiceClient | None = _clients.get(cache_key)
        if client is None:
            credential = {"account_name": account.name, "account_key": account.key} if account.key else account.sas
            # Our own code decides when to cut a file into blocks (upload_file), never the SDK.
            client = BlobServiceClient(
                account.endpoint,
                credential=credential,
                max_single_put_size=1 << 30,
                retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=4),
                connection_timeout=10,
                read_timeout=60,
            )
            _clients[cache_key] = client
        return client
