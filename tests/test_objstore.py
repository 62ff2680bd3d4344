"""Object storage primitives and the writer lease, on moto's S3 server and on a local folder."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from quarry.core.errors import QuarryError, StoreLocked, UsageError
from quarry.store import objstore
from quarry.store.lease import LEASE, Lease
from quarry.core.storeurl import StoreURL, is_url, parse_url
from quarry.store.objstore import PreconditionFailed, open_store
from s3server import aws_env, moto_server, new_bucket


@pytest.fixture(scope="module")
def s3():
    with moto_server() as (endpoint, env), aws_env(env):
        yield endpoint


@pytest.fixture(params=["s3", "file"])
def store(request, tmp_path):
    if request.param == "file":
        return open_store(parse_url(f"file://{tmp_path}/objects"))
    endpoint = request.getfixturevalue("s3")
    return open_store(parse_url(f"s3://{new_bucket(endpoint)}/some/prefix"))


@pytest.mark.parametrize("db, expected", [
    ("s3://bucket/a/b/", StoreURL("s3", "bucket", "a/b")),
    ("s3://bucket", StoreURL("s3", "bucket", "")),
    ("gs://b/p", StoreURL("gs", "b", "p")),
    ("az://container/p", StoreURL("az", "container", "p")),
    ("file:///tmp/x/", StoreURL("file", "", "tmp/x")),
])
def test_parse_url(db, expected):
    assert is_url(db)
    assert parse_url(db) == expected


@pytest.mark.parametrize("db, message", [
    ("ftp://host/x", "unknown store URL scheme 'ftp'"),
    ("s3:///prefix", "names no bucket"),
])
def test_parse_url_errors(db, message):
    with pytest.raises(UsageError, match=message):
        parse_url(db)


@pytest.mark.parametrize("db", ["./store", "/abs/store", "C:relative", "s3:/one-slash"])
def test_plain_paths_are_not_urls(db):
    assert not is_url(db)


def test_gs_and_az_name_what_is_missing():
    with pytest.raises(UsageError, match="conditional put"):
        open_store(parse_url("gs://bucket/prefix"))


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
    store.put_if_absent("CURRENT", b"first")
    with pytest.raises(PreconditionFailed):
        store.put_if_absent("CURRENT", b"second")
    assert store.get("CURRENT")[0] == b"first"


def test_put_if_match_needs_the_etag_it_read(store):
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
    src = tmp_path / "f.bin"
    src.write_bytes(bytes(range(256)) * (size // 256 + 1))
    store.upload_file("catalog-000001.duckdb", src)
    with pytest.raises(PreconditionFailed):
        store.upload_file("catalog-000001.duckdb", src)
    out = tmp_path / "back.bin"
    store.download_file("catalog-000001.duckdb", out)
    assert out.read_bytes() == src.read_bytes()
    with pytest.raises(FileNotFoundError):
        store.download_file("catalog-000002.duckdb", out)


def test_errors_name_the_url_and_never_the_secret(s3):
    import os

    bad = open_store(parse_url("s3://no-such-bucket-here/p"))
    with pytest.raises(QuarryError) as err:
        bad.put("x", b"1")
    assert "s3://no-such-bucket-here/p/x" in str(err.value)
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in str(err.value)


# --- the lease ----------------------------------------------------------------------------------

def test_lease_excludes_a_second_writer(store):
    with Lease(store, ttl=30) as first:
        with pytest.raises(StoreLocked, match=r"leased by another index run \(pid \d+ on"):
            Lease(store, ttl=30).acquire()
        first.check()
    assert store.get(LEASE) is None  # released
    Lease(store, ttl=30).acquire().release()


def test_an_expired_lease_is_taken_over(store):
    store.put(LEASE, json.dumps({"owner": "x", "host": "elsewhere", "pid": 1, "started": 0,
                                 "expires": time.time() - 1}).encode())
    lease = Lease(store, ttl=30).acquire()
    assert json.loads(store.get(LEASE)[0])["owner"] == lease.owner
    lease.release()


def test_a_dead_process_on_this_host_is_taken_over_at_once(store):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.put(LEASE, json.dumps({"owner": "x", "host": socket.gethostname(), "pid": dead.pid, "started": 0,
                                 "expires": time.time() + 3600}).encode())
    Lease(store, ttl=30).acquire().release()


def test_a_live_lease_elsewhere_is_respected(store):
    store.put(LEASE, json.dumps({"owner": "x", "host": "elsewhere", "pid": 1, "started": 0,
                                 "expires": time.time() + 3600}).encode())
    with pytest.raises(StoreLocked, match="on elsewhere"):
        Lease(store, ttl=30).acquire()


def test_a_lease_taken_over_is_lost_and_blocks_the_commit(store):
    lease = Lease(store, ttl=30).acquire()
    # another writer decided this one was dead (it stalled past the expiry) and took over
    data, etag = store.get(LEASE)
    store.put_if_match(LEASE, json.dumps({"owner": "other", "host": "h", "pid": 2, "started": 0,
                                          "expires": time.time() + 60}).encode(), etag)
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
