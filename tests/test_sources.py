"""Roots on object storage: trees on ``s3://`` (moto's S3 server), ``gs://`` (the GCS emulator) and
``az://`` (Azurite) indexed where they live, and re-indexed by listing alone.

The store is a local folder; only the documents are in the bucket. moto's request log counts the
object downloads (``GET /bucket/key``): a run with nothing to do downloads nothing. A second moto
server runs with its IAM checks on, for a 403 on one object and a listing that is refused.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE
from s3server import KEY, SECRET, aws_env, moto_server, new_bucket
from test_crash import contents

import quarry
from quarry.core.errors import UsageError
from quarry.core.storeurl import root_path
from quarry.ingest.plan import discover_roots

PREFIX = "tree"


# --- buckets on three emulators ------------------------------------------------------------------


class Bucket:
    """One bucket (container) of an emulator, written through the cloud's own SDK."""

    def __init__(self, scheme: str, name: str, endpoint: str | None = None):
        self.scheme, self.name = scheme, name
        if scheme == "s3":
            import boto3

            self.client = boto3.session.Session().client("s3", endpoint_url=endpoint or os.environ["AWS_ENDPOINT_URL"])
        elif scheme == "gs":
            from quarry.core.cloud import gcs_client

            self.client = gcs_client().bucket(name)
        else:
            from quarry.core.cloud import account_from_env, blob_service

            self.client = blob_service(account_from_env()).get_container_client(name)

    def url(self, key: str = PREFIX) -> str:
        return f"{self.scheme}://{self.name}/{key}"

    def put(self, key: str, data: bytes, content_type: str | None = None, metadata: dict | None = None) -> None:
        if self.scheme == "s3":
            extra = {"ContentType": content_type} if content_type else {}
            self.client.put_object(Bucket=self.name, Key=key, Body=data, Metadata=metadata or {}, **extra)
        elif self.scheme == "gs":
            blob = self.client.blob(key)
            blob.metadata = metadata
            blob.upload_from_string(data, content_type=content_type or "application/octet-stream")
        else:
            from azure.storage.blob import ContentSettings

            self.client.upload_blob(
                key,
                data,
                overwrite=True,
                metadata=metadata,
                content_settings=ContentSettings(content_type=content_type) if content_type else None,
            )

    def rm(self, key: str) -> None:
        if self.scheme == "s3":
            self.client.delete_object(Bucket=self.name, Key=key)
        elif self.scheme == "gs":
            self.client.blob(key).delete()
        else:
            self.client.delete_blob(key)

    def mv(self, old: str, new: str) -> None:
        """A rename as object storage has it: a server-side copy, then a delete."""
        if self.scheme == "s3":
            self.client.copy_object(Bucket=self.name, Key=new, CopySource={"Bucket": self.name, "Key": old})
        elif self.scheme == "gs":
            self.client.copy_blob(self.client.blob(old), self.client, new)
        else:
            target = self.client.get_blob_client(new)
            target.start_copy_from_url(self.client.get_blob_client(old).url)
            for _ in range(100):
                if target.get_blob_properties().copy.status != "pending":
                    break
                time.sleep(0.05)
        self.rm(old)

    def upload(self, tree: Path, prefix: str = PREFIX) -> None:
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(tree).as_posix()}", path.read_bytes())


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    """moto's S3 server with its request log; yields ``(endpoint, log path)``."""
    log = tmp_path_factory.mktemp("moto") / "requests.log"
    with moto_server(log=str(log)) as (endpoint, env), aws_env(env):
        yield endpoint, log


@pytest.fixture(scope="module")
def az():
    from azuriteserver import azurite_server

    with azurite_server() as (endpoint, env), aws_env(env):
        yield endpoint


@pytest.fixture(params=["s3", "gs", "az"])
def bucket(request) -> Bucket:
    if request.param == "s3":
        endpoint, _ = request.getfixturevalue("moto")
        return Bucket("s3", new_bucket(endpoint), endpoint)
    if request.param == "gs":
        from gcsserver import new_bucket as new_gcs_bucket

        return Bucket("gs", new_gcs_bucket(request.getfixturevalue("gcs").endpoint))
    from azuriteserver import new_container

    return Bucket("az", new_container(request.getfixturevalue("az")))


@pytest.fixture
def s3_bucket(moto) -> Bucket:
    return Bucket("s3", new_bucket(moto[0]), moto[0])


def gets(log: Path, bucket: Bucket) -> int:
    """Object downloads of ``bucket`` in moto's request log (listings are ``GET /bucket?…``)."""
    pattern = re.compile(rf'"GET /{re.escape(bucket.name)}/[^? ]+ HTTP')
    return sum(1 for line in log.read_text(errors="replace").splitlines() if pattern.search(line))


def observable(db) -> tuple:
    """What a user sees of an index, its paths under the root: the same for a local tree and a bucket."""
    docs, chunks, _vectors, _bm25 = contents(db)
    return [(d[0], d[2], d[3]) for d in docs], chunks


def edit(bucket: Bucket) -> None:
    """What test_crash.edit_tree does to a folder, done to the bucket: edit, delete, rename, add."""
    deploys = (SAMPLE / "runbooks" / "deploys.md").read_text()
    bucket.put(
        f"{PREFIX}/runbooks/deploys.md",
        (deploys + "\n## Kestrel\n\nThe kestrel budget review happens in March.\n").encode(),
    )
    bucket.rm(f"{PREFIX}/handbook/expenses.txt")
    bucket.mv(f"{PREFIX}/handbook/code-review.rst", f"{PREFIX}/handbook/reviews.rst")
    bucket.put(f"{PREFIX}/new.md", b"# New page\n\nA page added between runs about rollback drills.\n")


def edited_tree(tmp_path) -> Path:
    from test_crash import edit_tree

    tree = tmp_path / "local-tree"
    shutil.copytree(SAMPLE, tree)
    edit_tree(tree)
    return tree


# --- the life of a root on object storage ----------------------------------------------------------


def test_a_bucket_is_indexed_like_the_tree_and_reindexed_by_listing(bucket, tmp_path, run_flow, request):
    bucket.upload(SAMPLE)
    db = tmp_path / "db"
    first = run_flow([bucket.url()], db)
    assert (first["added"], first["failed"], first["status"]) == (5, 0, "completed"), first["errors"]
    run_flow([SAMPLE], tmp_path / "local")
    assert observable(db) == observable(tmp_path / "local")
    with quarry.open(db) as idx:
        paths = sorted(r[0] for r in idx.sql("SELECT path FROM documents").rows)
        assert paths[0] == bucket.url("tree/handbook/code-review.rst")
        assert idx.sql("SELECT DISTINCT root FROM documents").rows == [(bucket.url(),)]

    log = request.getfixturevalue("moto")[1] if bucket.scheme == "s3" else None
    before = gets(log, bucket) if log else 0
    again = run_flow([bucket.url()], db)
    assert (again["added"], again["updated"], again["skipped"], again["embedded_chunks"]) == (0, 0, 5, 0)
    if log:
        assert gets(log, bucket) == before, "a run with nothing to do downloaded objects"

    edit(bucket)
    before = gets(log, bucket) if log else 0
    third = run_flow([bucket.url()], db)
    counts = {k: third[k] for k in ("added", "updated", "moved", "deleted")}
    assert counts == {"added": 1, "updated": 1, "moved": 1, "deleted": 1}, third
    assert third["embedded_chunks"] <= 3  # the new page and the edited section, nothing of the move
    if log:
        assert gets(log, bucket) == before + 2  # the edited object and the new one, not the renamed one
    run_flow([edited_tree(tmp_path)], tmp_path / "local2")
    assert observable(db) == observable(tmp_path / "local2")


def test_the_cli_indexes_a_bucket_and_a_folder_in_one_run(s3_bucket, tmp_path, cli):
    s3_bucket.upload(SAMPLE / "runbooks", "docs")
    db = tmp_path / "db"
    run = cli("index", s3_bucket.url("docs/"), SAMPLE / "handbook", "--db", db, "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["added"] == 5 and report["roots"] == [s3_bucket.url("docs"), str(SAMPLE / "handbook")]
    found = cli("search", "rollback", "--db", db, "--json", "--path", s3_bucket.url("docs/*"))
    paths = {r["path"] for r in json.loads(found.stdout)["results"]}
    assert paths and all(p.startswith(s3_bucket.url("docs/")) for p in paths), paths
    assert KEY not in run.stdout + run.stderr and SECRET not in run.stdout + run.stderr


def test_a_dry_run_of_the_library_call_lists_urls(s3_bucket, tmp_path):
    s3_bucket.upload(SAMPLE)
    preview = quarry.index(s3_bucket.url(), tmp_path / "db", dry_run=True, include=("*.md",))
    assert sorted(preview["files"]["add"]) == [
        s3_bucket.url("tree/runbooks/deploys.md"),
        s3_bucket.url("tree/runbooks/incident-2024-03-postmortem.md"),
    ]


# --- what can go wrong -----------------------------------------------------------------------------


def test_roots_that_cannot_be_listed_are_named_by_the_scan(s3_bucket, monkeypatch):
    s3_bucket.upload(SAMPLE)
    s3_bucket.put("only/one.md", b"# One\n\nA single object.\n")
    found = discover_roots(
        [s3_bucket.url(), s3_bucket.url("nothing/here"), "s3://quarry-no-such-bucket/x", s3_bucket.url("only/one.md")],
        include=(),
        exclude=(),
    )
    status = {s.root: (s.status, s.walked) for s in found.scans}
    assert status == {
        s3_bucket.url(): ("ok", 5),
        s3_bucket.url("nothing/here"): ("empty", 0),
        "s3://quarry-no-such-bucket/x": ("missing", 0),
        s3_bucket.url("only/one.md"): ("ok", 1),
    }
    assert "bucket 'quarry-no-such-bucket' does not exist" in found.scans[2].error
    single = [f for f in found.files if f.path.endswith("one.md")][0]
    assert (single.root, single.rel_path) == (s3_bucket.url("only/one.md"), "one.md")

    unmatched = discover_roots([s3_bucket.url()], include=("*.pdf",), exclude=())
    assert unmatched.scans[0].status == "unmatched"

    # no server at the endpoint: the listing fails after the SDK's retries, the root is unreadable
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    down = discover_roots([s3_bucket.url()], include=(), exclude=())
    assert down.scans[0].status == "unreadable" and "cannot list it: EndpointConnectionError" in down.scans[0].error


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("s3://bucket/docs/", "s3://bucket/docs"),
        ("S3://bucket//docs//", "s3://bucket/docs"),
        ("gs://bucket", "gs://bucket"),
        ("az://container/a/b", "az://container/a/b"),
        ("file:///srv/docs", "/srv/docs"),
    ],
)
def test_a_root_url_is_kept_in_one_form(raw, expected):
    assert root_path(raw) == expected


@pytest.mark.parametrize(
    "raw, message",
    [
        ("s3://bucket/docs?X-Amz-Signature=abc", "remove the query string"),
        ("az://container/p?sv=1&sig=abc", "credentials .* come from the environment"),
        ("s3:///docs", "names no bucket"),
        ("http://host/docs", "quarry reads local paths and s3://"),
    ],
)
def test_a_root_url_that_cannot_be_right_is_a_usage_error(raw, message):
    with pytest.raises(UsageError, match=message) as caught:
        root_path(raw)
    assert "abc" not in str(caught.value)  # a signature in the URL is never repeated


def test_root_schemes_are_the_sources_registry_and_each_is_also_a_store_scheme(monkeypatch):
    from quarry.core.registry import SOURCES, STORES

    # one URL form for stores and roots: a scheme quarry reads documents from can hold a store too
    assert set(SOURCES.names()) == {"s3", "gs", "az"} and set(SOURCES.names()) <= set(STORES.names())
    with pytest.raises(UsageError, match=r"local paths and s3://, gs://, az:// URLs"):
        root_path("ftp://host/docs")
    monkeypatch.setitem(SOURCES._items, "demo", lambda bucket: None)  # a plugin's scheme is a root scheme
    assert root_path("DEMO://b/p/") == "demo://b/p"


@pytest.mark.parametrize(
    "var, value, message",
    [
        ("QUARRY_OBJECT_READS", "many", "QUARRY_OBJECT_READS='many' is not an integer"),
        ("QUARRY_OBJECT_READS", "0", "object_reads must be at least 1"),
        ("QUARRY_OBJECT_SPILL_MB", "lots", "QUARRY_OBJECT_SPILL_MB='lots' is not a number"),
    ],
)
def test_a_bad_read_setting_names_its_variable(monkeypatch, var, value, message):
    from quarry.core.errors import ConfigError
    from quarry.ingest import sources

    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        sources.reads() if "READS" in var else sources.spill_bytes()


def test_serve_and_the_library_take_url_roots_as_the_cli_does(tmp_path, monkeypatch):
    from quarry.flows.run import _roots

    monkeypatch.chdir(tmp_path)
    assert _roots(["s3://bucket/docs/", "gs://b", "az://c/p//", "tree"]) == [
        "s3://bucket/docs",
        "gs://b",
        "az://c/p",
        str(tmp_path / "tree"),
    ]


def test_a_failed_listing_keeps_every_document_and_the_store(s3_bucket, tmp_path, run_flow, cli, monkeypatch):
    s3_bucket.upload(SAMPLE)
    db = tmp_path / "db"
    assert run_flow([s3_bucket.url()], db)["added"] == 5
    before = observable(db)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = cli(
        "index",
        s3_bucket.url(),
        "--db",
        db,
        "--json",
        env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_MAX_ATTEMPTS": "2"},
    )
    assert out.returncode == 3, out.stderr
    report = json.loads(out.stdout)
    assert report["deleted"] == 0 and report["errors"][0]["path"] == s3_bucket.url()
    assert (
        "cannot list it" in report["errors"][0]["error"]
        and "5 indexed documents are kept" in report["errors"][0]["error"]
    )
    assert observable(db) == before
    # the bucket emptied: the guard keeps the documents until told otherwise
    for key in [k["Key"] for k in s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["Contents"]]:
        s3_bucket.rm(key)
    out = cli("index", s3_bucket.url(), "--db", db, "--json")
    assert out.returncode == 3 and "no files under it" in json.loads(out.stdout)["errors"][0]["error"]
    assert observable(db) == before
    allowed = cli("index", s3_bucket.url(), "--db", db, "--json", "--allow-deletes")
    assert allowed.returncode == 0 and json.loads(allowed.stdout)["deleted"] == 5, allowed.stderr


def test_a_vanished_object_is_its_own_failure_and_comes_back(s3_bucket, tmp_path, run_flow, monkeypatch):
    s3_bucket.upload(SAMPLE)
    from quarry.ingest import process

    real = process.fetch_many

    def vanish_first(urls, limit=0):  # the object is deleted between the listing and its read
        urls = list(urls)
        s3_bucket.rm(urls[0].split(f"{s3_bucket.name}/", 1)[1])
        return real(urls, limit)

    monkeypatch.setattr(process, "fetch_many", vanish_first)
    report = run_flow([s3_bucket.url()], tmp_path / "db")
    assert report["status"] == "partial" and report["added"] == 4 and report["failed"] == 1
    assert "object disappeared before it could be read (404 NoSuchKey)" in report["errors"][0]["error"]
    monkeypatch.setattr(process, "fetch_many", real)
    again = run_flow([s3_bucket.url()], tmp_path / "db")
    assert (again["failed"], again["added"], again["deleted"]) == (0, 0, 0)


def test_an_object_rewritten_mid_run_is_stored_as_it_was_read(s3_bucket, tmp_path, cli, moto):
    s3_bucket.upload(SAMPLE)
    db, gate = tmp_path / "db", tmp_path / "go"
    env = {**os.environ, "QUARRY_FAULT": "pause:before-read", "QUARRY_FAULT_FILE": str(gate)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "quarry.cli.main", "index", s3_bucket.url(), "--db", str(db), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "go.paused").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.1)
        # listed and planned with the old bytes; rewritten before the read
        s3_bucket.put(f"{PREFIX}/runbooks/deploys.md", b"# Deploys\n\nRewritten: the osprey rollout checklist.\n")
    finally:
        gate.touch()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    listed = s3_bucket.client.head_object(Bucket=s3_bucket.name, Key=f"{PREFIX}/runbooks/deploys.md")["ETag"]
    with quarry.open(db) as idx:
        (sha,) = idx.sql("SELECT sha256 FROM documents WHERE rel_path = 'runbooks/deploys.md'").rows[0]
        assert [r.text for r in idx.search("osprey rollout", k=1, mode="bm25").results][0].count("osprey")
    assert sha.startswith(f"etag:{listed.strip(chr(34))}:")  # the identity of what was parsed
    before = gets(moto[1], s3_bucket)
    again = cli("index", s3_bucket.url(), "--db", db, "--json")
    assert json.loads(again.stdout)["updated"] == 0 and gets(moto[1], s3_bucket) == before


@pytest.mark.slow  # three CLI runs; the kill points themselves are tested on every store in test_crash.py
def test_kill_then_rerun_equals_a_clean_run(s3_bucket, tmp_path, cli, run_flow):
    s3_bucket.upload(SAMPLE)
    db = tmp_path / "db"
    run_flow([s3_bucket.url()], db)  # the setting, not the case: in-process
    edit(s3_bucket)
    killed = cli("index", s3_bucket.url(), "--db", db, env={"QUARRY_FAULT": "after-vectors"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    rerun = cli("index", s3_bucket.url(), "--db", db)
    assert rerun.returncode == 0, rerun.stderr
    run_flow([s3_bucket.url()], tmp_path / "clean")
    assert contents(db) == contents(tmp_path / "clean")


# --- IAM: a 403 on one object, a listing refused ----------------------------------------------------

IAM_BUCKET = "quarry-iam"


@pytest.fixture(scope="module")
def iam(tmp_path_factory):
    """moto with IAM checks on: user ``reader`` may do anything in S3 but read ``tree/secret.md``;
    user ``blind`` may not list. Yields ``{user: AWS_* environment}``."""
    import boto3

    # moto checks requests after this many: its readiness probe, then 2 users x 3 IAM calls
    with moto_server(server_env={"INITIAL_NO_AUTH_ACTION_COUNT": "7"}) as (endpoint, env):
        client = boto3.session.Session(
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1"
        ).client("iam", endpoint_url=endpoint)
        users = {}
        for user, deny in [
            ("reader", {"Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{IAM_BUCKET}/tree/secret.md"}),
            ("blind", {"Action": "s3:ListBucket", "Resource": "*"}),
        ]:
            client.create_user(UserName=user)
            client.put_user_policy(
                UserName=user,
                PolicyName="p",
                PolicyDocument=json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
                            {"Effect": "Deny", **deny},
                        ],
                    }
                ),
            )
            key = client.create_access_key(UserName=user)["AccessKey"]
            users[user] = {
                **env,
                "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            }
        reader = users["reader"]
        s3 = boto3.session.Session(
            reader["AWS_ACCESS_KEY_ID"], reader["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1"
        ).client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket=IAM_BUCKET)
        for path in sorted(SAMPLE.rglob("*")):
            if path.is_file():
                s3.put_object(
                    Bucket=IAM_BUCKET, Key=f"tree/{path.relative_to(SAMPLE).as_posix()}", Body=path.read_bytes()
                )
        s3.put_object(Bucket=IAM_BUCKET, Key="tree/secret.md", Body=b"# Secret\n\nNot for us.\n")
        with pytest.raises(Exception, match="AccessDenied"):  # the policy holds (else the count above is off)
            s3.get_object(Bucket=IAM_BUCKET, Key="tree/secret.md")
        yield users


def test_a_403_on_one_object_is_that_objects_failure(iam, tmp_path, cli):
    db = tmp_path / "db"
    out = cli("index", f"s3://{IAM_BUCKET}/tree", "--db", db, "--json", env=iam["reader"])
    assert out.returncode == 3, out.stderr
    report = json.loads(out.stdout)
    assert (report["added"], report["failed"]) == (5, 1)
    assert report["errors"] == [
        {"path": f"s3://{IAM_BUCKET}/tree/secret.md", "error": "cannot read object: 403 AccessDenied (Access Denied)"}
    ]
    text = out.stdout + out.stderr
    assert iam["reader"]["AWS_SECRET_ACCESS_KEY"] not in text and iam["reader"]["AWS_ACCESS_KEY_ID"] not in text

    refused = cli("index", f"s3://{IAM_BUCKET}/tree", "--db", db, "--json", env=iam["blind"])
    assert refused.returncode == 3, refused.stderr
    report = json.loads(refused.stdout)
    assert report["deleted"] == 0 and report["errors"][0]["path"] == f"s3://{IAM_BUCKET}/tree"
    assert "cannot list it: 403 AccessDenied" in report["errors"][0]["error"]
    status = cli("status", "--db", db, "--json")
    assert json.loads(status.stdout)["documents"] == 5


# --- archives, metadata, filters, permissions -------------------------------------------------------


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_an_archive_in_a_bucket_is_listed_once_and_its_members_are_urls(
    s3_bucket, tmp_path, run_flow, moto, monkeypatch
):
    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))
    s3_bucket.put("arc/notes.zip", _zip({"a.md": b"# Alpha\n\nThe heron survey.\n", "sub/b.md": b"# Beta\n\nGull.\n"}))
    db = tmp_path / "db"
    first = run_flow([s3_bucket.url("arc")], db)
    assert first["added"] == 2, first["errors"]
    with quarry.open(db) as idx:
        hit = idx.search("heron survey", k=1, mode="bm25").results[0]
        assert hit.path == s3_bucket.url("arc/notes.zip!/a.md")
    before = gets(moto[1], s3_bucket)
    again = run_flow([s3_bucket.url("arc")], db)
    assert again["skipped"] == 2 and gets(moto[1], s3_bucket) == before  # the listing of its members is kept
    s3_bucket.put("arc/notes.zip", _zip({"a.md": b"# Alpha\n\nThe heron survey.\n", "sub/b.md": b"# Beta\n\nTern.\n"}))
    third = run_flow([s3_bucket.url("arc")], db)
    assert (third["updated"], third["skipped"]) == (1, 1) and gets(moto[1], s3_bucket) == before + 2


def test_object_metadata_and_paths_filter_like_files(s3_bucket, tmp_path, run_flow, cli):
    s3_bucket.put(
        "m/a.md",
        b"# A\n\nPelican migration notes.\n",
        content_type="text/markdown",
        metadata={"team": "birds", "Review-State": "final"},
    )
    s3_bucket.put("m/b.md", b"# B\n\nPelican feeding notes.\n", metadata={"team": "fish"})
    s3_bucket.put("m/skip/c.md", b"# C\n\nPelican.\n")
    report = run_flow([s3_bucket.url("m")], tmp_path / "db", overrides={"exclude": ("skip/*",)})
    assert report["added"] == 2
    with quarry.open(tmp_path / "db") as idx:
        meta = dict(idx.sql("SELECT rel_path, metadata FROM documents").rows)
        assert json.loads(meta["a.md"]) == {"content_type": "text/markdown", "team": "birds", "review-state": "final"}
        hits = idx.search("pelican", k=5, mode="bm25", filters=quarry.Filter.build(where=["metadata.team = 'birds'"]))
        assert [h.path for h in hits.results] == [s3_bucket.url("m/a.md")]
        by_path = idx.search("pelican", k=5, mode="bm25", filters=quarry.Filter.build(path=[s3_bucket.url("m/b.*")]))
        assert [h.path for h in by_path.results] == [s3_bucket.url("m/b.md")]
        relative = idx.search("pelican", k=5, mode="bm25", filters=quarry.Filter.build(path=["a.md"]))
        assert [h.path for h in relative.results] == [s3_bucket.url("m/a.md")]
    out = cli(
        "export", tmp_path / "out", "--db", tmp_path / "db", "--path", s3_bucket.url("m/a.md"), "--format", "jsonl"
    )
    assert out.returncode == 0, out.stderr
    documents = [json.loads(line) for line in (tmp_path / "out" / "documents.jsonl").read_text().splitlines()]
    assert [d["path"] for d in documents] == [s3_bucket.url("m/a.md")]
    assert (
        json.loads(documents[0]["metadata"])["team"] == "birds"
        if isinstance(documents[0]["metadata"], str)
        else documents[0]["metadata"]["team"] == "birds"
    )


def test_permission_rules_match_urls_as_paths(s3_bucket, tmp_path, cli):
    s3_bucket.upload(SAMPLE)
    rules = tmp_path / "acl.yaml"
    rules.write_text(
        f"- path: 'runbooks/**'\n  principals: [group:ops]\n"
        f"- path: '{s3_bucket.url('tree/handbook')}/*.html'\n  principals: [group:people]\n"
        f"- path: '**'\n  principals: [public]\n"
    )
    db = tmp_path / "db"
    assert cli("index", s3_bucket.url(), "--db", db, "--acl-rules", rules).returncode == 0
    with quarry.open(db) as idx:
        principals = {p: tuple(r) for p, r in idx.sql("SELECT rel_path, principals FROM documents").rows}
    assert principals["runbooks/deploys.md"] == ("group:ops",)
    assert principals["handbook/onboarding.html"] == ("group:people",)
    assert principals["handbook/expenses.txt"] == ("public",)
    posix = cli("index", s3_bucket.url(), "--db", db, "--acl", "posix")
    assert posix.returncode == 2 and "--acl posix reads owners and modes from a file system" in posix.stderr


def test_a_large_object_is_spilled_to_disk_and_removed(s3_bucket, tmp_path, run_flow, monkeypatch):
    import tempfile

    monkeypatch.setenv("QUARRY_OBJECT_SPILL_MB", "0.001")  # 1 KB: every object here goes to a file
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    big = "# Big\n\n" + "\n\n".join(f"Paragraph {i} about the cormorant colony." for i in range(400))
    s3_bucket.put("big/big.md", big.encode())
    report = run_flow([s3_bucket.url("big")], tmp_path / "db")
    assert report["added"] == 1 and report["chunks"] > 5
    assert not list((tmp_path / "tmp").glob("quarry-object-*"))


def test_an_sdk_error_is_the_objects_failure_without_a_credential(monkeypatch):
    from quarry.ingest import sources

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-key-123")

    class Broken(sources.Source):
        scheme = "s3"

        def get(self, key, sink):
            if key.endswith("bad.md"):
                raise RuntimeError(
                    "endpoint said no to very-secret-key-123 at https://h/x?X-Amz-Signature=abc123&y=1\nsecond line"
                )
            sink.write(b"# ok\n")
            return "etag:x:5", 5, {}

    monkeypatch.setattr(sources, "open_source", lambda scheme, bucket: Broken(bucket))
    got = dict(sources.fetch_many(["s3://b/ok.md", "s3://b/bad.md"]))
    assert got["s3://b/ok.md"].read() == b"# ok\n"
    failure = str(got["s3://b/bad.md"])
    assert failure.startswith("cannot read object: RuntimeError: endpoint said no")
    assert "very-secret-key-123" not in failure and "abc123" not in failure and "second line" not in failure
    assert "X-Amz-Signature=***" in failure


# --- a Dask cluster whose workers share no disk with the flow ---------------------------------------


@pytest.mark.slow
def test_dask_workers_read_the_objects_themselves(s3_bucket, tmp_path, cli, run_flow):
    from localserver import free_port, local_server

    s3_bucket.upload(SAMPLE)
    for i in range(30):  # more than one batch (8, 16, then the rest), so both workers get some
        s3_bucket.put(f"{PREFIX}/more/page-{i:02d}.md", f"# Page {i}\n\nNotes on bird {i} of the estuary.\n".encode())
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).with_name("dask"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    places = [tmp_path / name for name in ("scheduler", "worker-1", "worker-2")]
    for place in places:
        place.mkdir()
    import socket

    def up():
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    with local_server(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        up,
        "dask scheduler",
        60,
        cwd=places[0],
        env={**env, "HOME": str(places[0])},
    ):
        workers = [
            subprocess.Popen(
                [dask, "worker", address, "--nthreads", "1", "--no-dashboard", "--local-directory", str(place)],
                cwd=place,
                env={**env, "HOME": str(place), "TMPDIR": str(place)},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for place in places[1:]
        ]
        try:
            from distributed import Client

            with Client(address, timeout=60) as client:
                client.wait_for_workers(2, timeout=60)
                # The flow's own process could not read an object (a limit of a few bytes): every
                # object is read, parsed and chunked by a worker, which has no such limit.
                out = cli(
                    "index",
                    s3_bucket.url(),
                    "--db",
                    tmp_path / "db",
                    "--dask-address",
                    address,
                    "--json",
                    env={"QUARRY_MAX_FILE_MB": "0.00001"},
                )
                assert out.returncode == 0, out.stderr
                report = json.loads(out.stdout)
                assert (report["added"], report["failed"], report["runner"]) == (35, 0, "dask"), report["errors"]
                executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
                assert len(executed) == 2 and all(n > 0 for n in executed.values()), executed
        finally:
            for w in workers:
                w.terminate()
                w.wait(timeout=30)
    run_flow([s3_bucket.url()], tmp_path / "threads")
    assert contents(tmp_path / "db") == contents(tmp_path / "threads")
