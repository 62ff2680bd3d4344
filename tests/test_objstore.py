"""Object storage primitives and the writer lease, on moto's S3 server, a GCS emulator, Azurite and a local
folder."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import gcsserver
import pytest
from azuriteserver import SECRET as AZ_SECRET
from azuriteserver import azurite_server, new_container
from gcsserver import conditional
from gcsserver import new_bucket as new_gcs_bucket
from s3server import aws_env, new_bucket

from quarry.core import cloud
from quarry.core.errors import QuarryError, StoreLocked, UsageError
from quarry.core.storeurl import StoreURL, is_url, parse_url
from quarry.store import objstore
from quarry.store.lease import LEASE, Lease
from quarry.store.objstore import PreconditionFailed, open_objects
from quarry.store.objstore import azure as objstore_azure
from quarry.store.objstore import gcs as objstore_gcs
from quarry.store.objstore.azure import AzureAccount, account_from_env


@pytest.fixture(scope="module")
def az():
    with azurite_server() as (endpoint, env), aws_env(env):
        yield endpoint


@pytest.fixture(params=["s3", "gs", "az", "file"])
def store(request, tmp_path):
    if request.param == "file":
        return open_objects(parse_url(f"file://{tmp_path}/objects"))
    if request.param == "az":
        return open_objects(parse_url(f"az://{new_container(request.getfixturevalue('az'))}/some/prefix"))
    if request.param == "gs":
        emulator = request.getfixturevalue("gcs")
        return open_objects(parse_url(f"gs://{new_gcs_bucket(emulator.endpoint)}/some/prefix"))
    endpoint = request.getfixturevalue("s3")
    return open_objects(parse_url(f"s3://{new_bucket(endpoint)}/some/prefix"))


@pytest.mark.parametrize(
    "db, expected",
    [
        ("s3://bucket/a/b/", StoreURL("s3", "bucket", "a/b")),
        ("s3://bucket", StoreURL("s3", "bucket", "")),
        ("gs://b/p", StoreURL("gs", "b", "p")),
        ("az://container/p", StoreURL("az", "container", "p")),
        ("file:///tmp/x/", StoreURL("file", "", "tmp/x")),
    ],
)
def test_parse_url(db, expected):
    assert is_url(db)
    assert parse_url(db) == expected


@pytest.mark.parametrize(
    "db, message",
    [
        ("ftp://host/x", "unknown store URL scheme 'ftp'"),
        ("s3:///prefix", "names no bucket"),
    ],
)
def test_parse_url_errors(db, message):
    with pytest.raises(UsageError, match=message):
        parse_url(db)


@pytest.mark.parametrize("db", ["./store", "/abs/store", "C:relative", "s3:/one-slash"])
def test_plain_paths_are_not_urls(db):
    assert not is_url(db)


def test_get_put_list_delete(store):
    assert store.get("CURRENT") is None
    etag = store.put("a/x.json", b"1")
    assert store.get("a/x.json") == (b"1", etag)
    store.put("b", b"2")
    assert store.list("") == ["a/x.json", "b"]
    assert store.list("a/") == ["a/x.json"]
    store.delete(["a/x.json", "missing"])
    assert store.list("") == ["b"]


def test_put_if_absent_wins_once(store):
    conditional(store)
    store.put_if_absent("CURRENT", b"first")
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("CURRENT", b"second")
    assert store.get("CURRENT")[0] == b"first"


def test_put_if_match_needs_the_etag_it_read(store):
    conditional(store)
    etag = store.put_if_absent("CURRENT", b"1")
    etag2 = store.put_if_match("CURRENT", b"2", etag)
    with pytest.raises(PreconditionFailed):
        store.put_if_match("CURRENT", b"3", etag)  # a writer that read generation 1 lost the race
    assert store.get("CURRENT") == (b"2", etag2)
    with pytest.raises(PreconditionFailed):
        store.put_if_match("never-written", b"x", etag)


@pytest.mark.parametrize("size", [10, 11 << 20])
def test_upload_is_create_only(store, tmp_path, monkeypatch, size):
    monkeypatch.setattr(objstore, "MULTIPART_BYTES", 5 << 20)  # S3's smallest part: 11 MiB is three parts
    # (on gs:// a resumable upload in 5 MiB chunks)
    src = tmp_path / "f.bin"
    src.write_bytes(bytes(range(256)) * (size // 256 + 1))
    store.upload_file("catalog-000001.duckdb", src)
    if store.url.scheme == "az" and size > objstore.MULTIPART_BYTES:  # went up as three blocks, one commit
        blob = store.container.get_blob_client("some/prefix/catalog-000001.duckdb")
        assert len(blob.get_block_list()[0]) == 3
    out = tmp_path / "back.bin"
    store.download_file("catalog-000001.duckdb", out)
    assert out.read_bytes() == src.read_bytes()
    with pytest.raises(FileNotFoundError):
        store.download_file("catalog-000002.duckdb", out)
    conditional(store)
    with pytest.raises(PreconditionFailed):
        store.upload_file("catalog-000001.duckdb", src)
    store.download_file("catalog-000001.duckdb", out)
    assert out.read_bytes() == src.read_bytes()


def test_errors_name_the_url_and_never_the_secret(s3):
    import os

    bad = open_objects(parse_url("s3://no-such-bucket-here/p"))
    with pytest.raises(QuarryError) as err:
        bad.put("x", b"1")
    assert "s3://no-such-bucket-here/p/x" in str(err.value)
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in str(err.value)


# --- gs:// only ---------------------------------------------------------------------------------


def test_gs_generations_are_the_etags(gcs):
    store = open_objects(parse_url(f"gs://{new_gcs_bucket(gcs.endpoint)}/p"))
    first = store.put("CURRENT", b"1")
    second = store.put("CURRENT", b"2")
    assert first.isdigit() and second.isdigit() and first != second
    assert store.get("CURRENT") == (b"2", second)


def test_gs_errors_name_the_url_and_never_the_secret(gcs, tmp_path, monkeypatch):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    bad = open_objects(parse_url("gs://no-such-bucket-here/p"))
    with pytest.raises(QuarryError) as err:
        bad.put("x", b"1")
    assert "gs://no-such-bucket-here/p/x" in str(err.value) and "404" in str(err.value)

    # A service-account key that loads, and a token endpoint that refuses: the error names the
    # URL and the failure, never the key.
    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    key = tmp_path / "service-account.json"
    key.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "p",
                "private_key_id": "quarry-key-id-1234",
                "private_key": pem,
                "client_email": "quarry@p.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": f"http://127.0.0.1:{_closed_port()}/token",
            }
        )
    )
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setattr(objstore_gcs, "RETRY_SECONDS", 1.0)  # the refused token endpoint is retried
    with pytest.raises(QuarryError) as err:
        open_objects(parse_url("gs://some-bucket/p")).get("CURRENT")
    message = str(err.value)
    assert "gs://some-bucket/p/CURRENT" in message
    body = pem.split("-----")[2].strip()
    assert all(line not in message for line in body.splitlines()) and "quarry-key-id-1234" not in message


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


def test_gs_without_the_client_library_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    with pytest.raises(UsageError, match=r"pip install 'quarry\[gcs\]'"):
        open_objects(parse_url("gs://bucket/prefix"))


def assert_one_winner_per_race(store) -> None:
    """16 writers put one key create-only at the same moment, RACE_TRIALS times: one wins each time."""
    from concurrent.futures import ThreadPoolExecutor

    barrier = threading.Barrier(16)

    def attempt(args):
        key, i = args
        barrier.wait()
        try:
            store.put_if_absent(key, str(i).encode())
            return 1
        except PreconditionFailed:
            return 0

    with ThreadPoolExecutor(16) as pool:
        winners = [sum(pool.map(attempt, [(f"k{trial}", i) for i in range(16)])) for trial in range(RACE_TRIALS)]
    assert winners == [1] * RACE_TRIALS, f"trials with more than one winner: {[w for w in winners if w != 1]}"


def test_gs_create_only_race_has_one_winner(gcs):
    if not gcs.preconditions:
        pytest.skip(gcsserver.NO_PRECONDITIONS)
    assert_one_winner_per_race(open_objects(parse_url(f"gs://{new_gcs_bucket(gcs.endpoint)}/race")))


RACE_TRIALS = 20

# --- az:// only ---------------------------------------------------------------------------------

KEY = "a2V5LWZvci10aGUtdGVzdA=="
AZURE_ENVS = [
    (
        {
            "AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};"
            "EndpointSuffix=core.windows.net"
        },
        AzureAccount("acct", "https://acct.blob.core.windows.net", key=KEY),
    ),
    (
        {"AZURE_STORAGE_CONNECTION_STRING": "BlobEndpoint=http://127.0.0.1:9/acct;SharedAccessSignature=sv=1&sig=abc"},
        AzureAccount("acct", "http://127.0.0.1:9/acct", sas="sv=1&sig=abc"),
    ),
    (
        {
            "AZURE_STORAGE_CONNECTION_STRING": "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=?sig=x"
        },
        AzureAccount("acct", "https://acct.blob.core.windows.net", sas="sig=x"),
    ),
    (
        {"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"},
        AzureAccount("devstoreaccount1", "http://127.0.0.1:10000/devstoreaccount1", key=objstore_azure.EMULATOR_KEY),
    ),
    (
        {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": KEY},
        AzureAccount("acct", "https://acct.blob.core.windows.net", key=KEY),
    ),
    (
        {
            "AZURE_STORAGE_ACCOUNT_NAME": "acct",
            "AZURE_STORAGE_SAS_TOKEN": "?sv=1&sig=abc",
            "AZURE_STORAGE_ENDPOINT": "https://proxy.example/acct/",
        },
        AzureAccount("acct", "https://proxy.example/acct", sas="sv=1&sig=abc"),
    ),
    (
        {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": "http://127.0.0.1:7/"},
        AzureAccount("devstoreaccount1", "http://127.0.0.1:7/devstoreaccount1", key=objstore_azure.EMULATOR_KEY),
    ),
    (
        {"AZURE_STORAGE_USE_EMULATOR": "1", "AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCESS_KEY": KEY},
        AzureAccount("acct", "http://127.0.0.1:10000/acct", key=KEY),
    ),
]


@pytest.mark.parametrize("env, expected", AZURE_ENVS)
def test_the_azure_account_comes_from_the_standard_environment(env, expected):
    account = account_from_env(env)
    assert (account, account.key, account.sas) == (expected, expected.key, expected.sas)
    assert KEY not in repr(account) and "sig=" not in repr(account)
    # LanceDB gets the same account, endpoint and credential as quarry's own client
    opts = account.lance_options()
    assert opts["azure_storage_account_name"] == expected.name
    assert opts["azure_storage_endpoint"] == expected.endpoint
    assert opts.get("azure_storage_account_key") == expected.key
    assert opts.get("azure_storage_sas_key") == (None if expected.key else expected.sas)
    assert opts.get("allow_http") == ("true" if expected.endpoint.startswith("http://") else None)


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY"),
        ({"AZURE_STORAGE_ACCOUNT_NAME": "acct"}, "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN"),
        ({"AZURE_STORAGE_CONNECTION_STRING": "AccountName=acct"}, "names no account, blob endpoint and key"),
    ],
)
def test_an_azure_environment_without_an_account_says_what_to_set(env, message):
    with pytest.raises(UsageError, match=message):
        account_from_env(env)


def test_az_without_the_azure_sdk_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "azure.storage.blob", None)
    monkeypatch.setattr(cloud, "_clients", {})
    with pytest.raises(UsageError, match=r"pip install 'quarry\[azure\]'"):
        objstore_azure.AzureObjectStore(parse_url("az://c/p"), AzureAccount("acct", "https://x", key=KEY))


def test_azure_errors_name_the_url_and_never_the_key_or_token(az):
    container = new_container(az)
    missing = open_objects(parse_url("az://no-such-container/p"))
    with pytest.raises(QuarryError, match="container 'no-such-container' does not exist in storage account") as err:
        missing.put("x", b"1")
    assert "az://no-such-container/p/x" in str(err.value) and AZ_SECRET not in str(err.value)

    wrong_key = "d3Jvbmcta2V5LW5vdC1mb3Itb3V0cHV0"
    token = "sv=2024-08-04&ss=b&srt=sco&sp=rwdl&se=2099-01-01T00:00:00Z&sig=bm90LWEtcmVhbC1zaWduYXR1cmU%3D"
    endpoint = f"{az}/quarrytest"
    for account, secret in [
        (AzureAccount("quarrytest", endpoint, key=wrong_key), wrong_key),
        (AzureAccount("quarrytest", endpoint, sas=token), token),
    ]:
        bad = objstore_azure.AzureObjectStore(parse_url(f"az://{container}/p"), account)
        with pytest.raises(QuarryError) as err:
            bad.put("x", b"1")
        text = str(err.value)
        assert f"az://{container}/p/x" in text and "403" in text, text
        assert secret not in text and "sig=" not in text and AZ_SECRET not in text


def test_az_create_only_race_has_one_winner(az):
    assert_one_winner_per_race(open_objects(parse_url(f"az://{new_container(az)}/race")))


def test_lancedb_writes_to_the_account_quarry_resolved(az, tmp_path, monkeypatch):
    """LanceDB knows no connection string: it gets quarry's resolved account as storage_options."""
    import numpy as np

    from quarry.core.storeurl import local_dir
    from quarry.store import vectors

    for var in (
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURITE_BLOB_STORAGE_URL",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT_KEY",
    ):
        monkeypatch.delenv(var)
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        f"DefaultEndpointsProtocol=http;AccountName=quarrytest;AccountKey={AZ_SECRET};BlobEndpoint={az}/quarrytest;",
    )
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache"))
    url = f"az://{new_container(az)}/store"
    table = vectors.open_for_write(local_dir(url), "m", 4, 0)
    table.add(
        [
            {
                "chunk_id": "ab:0",
                "doc_id": "ab",
                "text_hash": "cd",
                "vector": np.ones(4, np.float32),
                "path": "/a",
                "file_type": "md",
                "section": "",
                "chunk_index": 0,
                "page_start": 0,
                "page_end": 0,
            }
        ]
    )
    keys = open_objects(parse_url(url)).list("lance/")
    assert any(k.endswith(".manifest") for k in keys) and any(k.endswith(".lance") for k in keys), keys
    assert vectors.open_for_read(local_dir(url), table.name, table.version).count_rows() == 1


# --- the lease ----------------------------------------------------------------------------------


def test_lease_excludes_a_second_writer(store):
    with Lease(store, ttl=30) as first:
        with pytest.raises(StoreLocked, match=r"leased by another index run \(pid \d+ on"):
            Lease(store, ttl=30).acquire()
        first.check()
    assert store.get(LEASE) is None  # released
    Lease(store, ttl=30).acquire().release()


def test_an_expired_lease_is_taken_over(store):
    store.put(
        LEASE,
        json.dumps({"owner": "x", "host": "elsewhere", "pid": 1, "started": 0, "expires": time.time() - 1}).encode(),
    )
    lease = Lease(store, ttl=30).acquire()
    assert json.loads(store.get(LEASE)[0])["owner"] == lease.owner
    lease.release()


def test_a_dead_process_on_this_host_is_taken_over_at_once(store):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.put(
        LEASE,
        json.dumps(
            {"owner": "x", "host": socket.gethostname(), "pid": dead.pid, "started": 0, "expires": time.time() + 3600}
        ).encode(),
    )
    Lease(store, ttl=30).acquire().release()


def test_a_live_lease_elsewhere_is_respected(store):
    store.put(
        LEASE,
        json.dumps({"owner": "x", "host": "elsewhere", "pid": 1, "started": 0, "expires": time.time() + 3600}).encode(),
    )
    with pytest.raises(StoreLocked, match="on elsewhere"):
        Lease(store, ttl=30).acquire()


def test_a_lease_taken_over_is_lost_and_blocks_the_commit(store):
    conditional(store)
    lease = Lease(store, ttl=30).acquire()
    # another writer decided this one was dead (it stalled past the expiry) and took over
    data, etag = store.get(LEASE)
    store.put_if_match(
        LEASE,
        json.dumps({"owner": "other", "host": "h", "pid": 2, "started": 0, "expires": time.time() + 60}).encode(),
        etag,
    )
    with pytest.raises(QuarryError, match="lost its writer lease"):
        lease.check()
    lease.release()
    assert json.loads(store.get(LEASE)[0])["owner"] == "other"  # not deleted: it is not ours


def test_the_lease_is_renewed(store):
    lease = Lease(store, ttl=0.6).acquire()
    first = json.loads(store.get(LEASE)[0])["expires"]
    time.sleep(0.5)
    assert json.loads(store.get(LEASE)[0])["expires"] > first
    lease.check()
    lease.release()


class AnswerLost:
    """An object store whose first conditional put on ``key`` lands and then fails its condition,
    as the SDK's retry of a put whose answer was lost does."""

    def __init__(self, inner, key: str):
        self.inner, self.key, self.fired = inner, key, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _lose(self, put, key, *args):
        etag = put(key, *args)
        if key == self.key and not self.fired:
            self.fired = True
            raise PreconditionFailed(key)
        return etag

    def put_if_absent(self, key, data):
        return self._lose(self.inner.put_if_absent, key, data)

    def put_if_match(self, key, data, etag):
        return self._lose(self.inner.put_if_match, key, data, etag)


def test_a_retried_put_that_landed_is_not_a_lost_race(store):
    lost_answer = AnswerLost(store, LEASE)
    lease = Lease(lost_answer, ttl=30).acquire()  # its put landed: the lease is ours, not StoreLocked
    assert lost_answer.fired
    assert lease.etag == store.get(LEASE)[1]
    lost_answer.fired = False
    lease.renew()  # a renewal that landed is not a take-over
    assert lost_answer.fired and not lease.lost
    lease.check()
    lease.release()
    assert store.get(LEASE) is None
