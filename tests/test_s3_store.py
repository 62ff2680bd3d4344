"""A store on object storage, real ``quarry`` processes: every test runs on an ``s3://`` store on moto's
S3 server, on a ``gs://`` store on a GCS emulator and on an ``az://`` store on Azurite, all on 127.0.0.1.

On ``gs://`` the tests that index write LanceDB tables, which no emulator here can hold, and skip
(:func:`lance`); the commit protocol's own tests run. The ``az://`` processes know the account by a
connection string only (test_objstore.py covers the emulator variables), which LanceDB gets from
quarry as storage options: every test runs there.

Each writer and reader gets its own ``QUARRY_STORE_CACHE``, as a process on another machine would:
all they share is the bucket (container). Credentials are fake and must appear in no output, log or object.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from azuriteserver import SECRET as AZ_SECRET
from azuriteserver import azurite_server, connection_env, new_container
from conftest import ROOT, SAMPLE
from gcsserver import NO_LANCE, conditional
from gcsserver import new_bucket as new_gcs_bucket
from s3server import KEY, SECRET, aws_env, new_bucket
from test_crash import contents, edit_tree

import quarry
from quarry.core.errors import QuarryError, StoreLocked
from quarry.core.storeurl import local_dir, parse_url
from quarry.store.handle import open_store
from quarry.store.layout import WriterLock, write_pointer
from quarry.store.objstore import open_objects
from quarry.store.pointer import Pointer

QUERY = "deploy rollback expenses review"


@pytest.fixture(scope="module")
def az():
    with azurite_server() as (endpoint, _), aws_env(connection_env(endpoint)):
        yield endpoint


@pytest.fixture(params=["s3", "gs", "az"])
def url(request, tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache-here"))
    if request.param == "gs":
        return f"gs://{new_gcs_bucket(request.getfixturevalue('gcs').endpoint)}/store"
    if request.param == "az":
        return f"az://{new_container(request.getfixturevalue('az'))}/store"
    return f"s3://{new_bucket(request.getfixturevalue('s3'))}/store"


def lance(url: str) -> None:
    """Skip the calling test on gs://, where LanceDB cannot write to the emulator."""
    if url.startswith("gs://"):
        pytest.skip(NO_LANCE)


@pytest.fixture
def tree(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "tree")
    return tmp_path / "tree"


def machine(tmp_path, name: str) -> dict:
    """The environment of a process on another machine: its own cache of the store."""
    return {"QUARRY_STORE_CACHE": str(tmp_path / f"cache-{name}")}


def top(result) -> list[tuple[str, str]]:
    return [(r["path"].split("/tree/")[-1], r["chunk_id"].split(":")[-1]) for r in json.loads(result.stdout)["results"]]


def remote_keys(url: str) -> list[str]:
    return [k for k in open_objects(parse_url(url)).list("") if not k.startswith("lance/")]


def assert_no_secret(*texts):
    for text in texts:
        assert SECRET not in text and KEY not in text and AZ_SECRET not in text


def test_index_reindex_runs_and_search_from_another_machine(url, tree, tmp_path, cli):
    lance(url)
    outputs = []
    first = cli("index", tree, "--db", url, env=machine(tmp_path, "writer"))
    outputs += [first.stdout, first.stderr]
    assert first.returncode == 0, first.stderr
    second = cli("index", tree, "--db", url, env=machine(tmp_path, "writer"))
    outputs += [second.stdout, second.stderr]
    assert second.returncode == 0, second.stderr

    runs = cli("runs", "--db", url, "--json", env=machine(tmp_path, "other"))
    assert runs.returncode == 0, runs.stderr
    rows = json.loads(runs.stdout)
    assert [r["embedded_chunks"] for r in rows][:2] == [0, 18] and rows[1]["status"] == "completed"

    local = tmp_path / "local"
    assert cli("index", tree, "--db", local).returncode == 0
    expected = cli("search", QUERY, "--db", local, "--json", "-k", "5")
    found = cli("search", QUERY, "--db", url, "--json", "-k", "5", env=machine(tmp_path, "reader"))
    assert found.returncode == 0, found.stderr
    assert top(found) == top(expected)
    status = cli("status", "--db", url, "--json", env=machine(tmp_path, "reader"))
    assert json.loads(status.stdout)["chunks"] == 18
    outputs += [runs.stdout, found.stdout, found.stderr, status.stdout]

    # The writer's remote objects: one generation, its journal object merged or pending, no lease.
    keys = remote_keys(url)
    assert "CURRENT" in keys and "catalog-000001.duckdb" in keys and "lease" not in keys
    assert any(k.startswith("index-000001/") for k in keys)
    store = open_objects(parse_url(url))
    assert any(k.endswith(".manifest") for k in store.list("lance/"))  # LanceDB wrote to the same bucket
    outputs += [store.get(k)[0].decode("utf-8", "replace") for k in keys if k.endswith((".json", "CURRENT"))]
    for folder in (tmp_path / "cache-writer", tmp_path / "cache-reader"):
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix in ("", ".json", ".jsonl", ".log", ".txt"):
                outputs.append(path.read_text(errors="replace"))
    with quarry.open(url) as idx:
        outputs.append(json.dumps(idx.runs(), default=str))
    assert_no_secret(*outputs)


def test_incremental_runs_reach_an_open_reader(url, tree, tmp_path, cli, monkeypatch):
    lance(url)
    assert cli("index", tree, "--db", url, env=machine(tmp_path, "writer")).returncode == 0
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache-reader"))
    with quarry.open(url) as idx:
        assert not [r for r in idx.search("kestrel budget", k=3, mode="bm25").results if "kestrel" in r.text]
        edit_tree(tree)
        run = cli("index", tree, "--db", url, "--json", env=machine(tmp_path, "writer"))
        assert run.returncode == 0, run.stderr
        report = json.loads(run.stdout)
        assert (report["added"], report["updated"], report["moved"], report["deleted"]) == (1, 1, 1, 1)
        # the next call reads the new CURRENT and downloads generation 2, once
        assert [r for r in idx.search("kestrel budget", k=3, mode="bm25").results if "kestrel" in r.text]
        assert idx.snapshot.pointer.generation == 2
    cache = local_dir(url)
    assert (cache / "catalog-000002.duckdb").is_file() and (cache / "index-000002").is_dir()
    assert {k for k in remote_keys(url) if k.startswith("catalog-")} == {
        "catalog-000001.duckdb",
        "catalog-000002.duckdb",
    }


# On az:// a slow test: its deletes and lease conflicts also run in test_objstore.py and test_maintain.py on Azurite.
@pytest.mark.parametrize("url", ["s3", pytest.param("az", marks=pytest.mark.slow)], indirect=True)
def test_retention_keeps_the_last_generations(url, tree, tmp_path, cli):
    lance(url)
    env = {**machine(tmp_path, "writer"), "QUARRY_KEEP_GENERATIONS": "1"}
    assert cli("index", tree, "--db", url, env=env).returncode == 0
    edit_tree(tree)
    assert cli("index", tree, "--db", url, env=env).returncode == 0
    assert {k.split("/")[0] for k in remote_keys(url) if k.startswith(("catalog-", "index-"))} == {
        "catalog-000002.duckdb",
        "index-000002",
    }


@pytest.fixture(scope="module")
def clean_contents(tmp_path_factory, prefect_api):
    base = tmp_path_factory.mktemp("clean")
    shutil.copytree(SAMPLE, base / "tree")
    edit_tree(base / "tree")
    done = subprocess.run(
        [sys.executable, "-m", "quarry.cli", "index", str(base / "tree"), "--db", str(base / "db")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return contents(base / "db")


def reader_contents(url, tmp_path, name, monkeypatch):
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / f"cache-{name}"))
    return contents(url)


# The second run commits a catalog layer and an index segment over the first (`layers`, the usual
# commit of a big store), or a new whole catalog (`base`: a small store's edit passes a quarter of it).
LAYOUTS = {"layers": {"QUARRY_REBASE_SHARE": "100"}, "base": {}}


# The kill points are the commit protocol's (quarry/store/remote.py): the same code on every backend
# and under either layout, which only changes the files uploaded (the local commit under each layout
# is test_crash.py's). s3:// runs every point, after-upload under both layouts; az:// one on each
# side of the pointer's move. Kept short: each costs CI half a minute.
REMOTE_KILLS = [
    ("s3", "after-upload", "layers"),
    ("s3", "after-upload", "base"),
    ("az", "after-upload", "layers"),
    ("s3", "after-vectors", "layers"),
    ("s3", "before-commit", "layers"),
    ("s3", "after-commit", "layers"),
    ("az", "before-commit", "layers"),
]


@pytest.mark.parametrize(
    "url, fault, layout",
    [
        pytest.param(backend, fault, layout, marks=() if fault == "after-upload" else pytest.mark.slow)
        for backend, fault, layout in REMOTE_KILLS
    ],
    indirect=["url"],
)
def test_kill_then_rerun_equals_a_clean_run(
    fault, layout, url, tree, tmp_path, cli, run_flow, clean_contents, monkeypatch
):
    writer = {**machine(tmp_path, "writer"), **LAYOUTS[layout]}
    with monkeypatch.context() as m:  # the first run is the setting, not the case: in-process, 5 s less
        for name, value in writer.items():
            m.setenv(name, value)
        run_flow([tree], url)
    before = reader_contents(url, tmp_path, "r1", monkeypatch)
    edit_tree(tree)

    killed = cli("index", tree, "--db", url, env={**writer, "QUARRY_FAULT": fault})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "lease" in remote_keys(url)  # the dead writer's lease stays behind
    if fault == "after-upload":  # generation 2 is uploaded whole, but CURRENT does not name it
        assert "catalog-000002.duckdb" in remote_keys(url)
    after_kill = reader_contents(url, tmp_path, "r2", monkeypatch)
    assert after_kill == (clean_contents if fault == "after-commit" else before)

    # Same host, dead pid: the lease is taken over at once, the debris removed, the run redone.
    rerun = cli("index", tree, "--db", url, "--json", env=writer)
    assert rerun.returncode == 0, rerun.stderr
    assert reader_contents(url, tmp_path, "r3", monkeypatch) == clean_contents
    keys = remote_keys(url)
    assert "lease" not in keys
    assert max(int(k[8:14]) for k in keys if k.startswith("catalog-")) == 2
    current, _ = open_objects(parse_url(url)).get("CURRENT")
    assert len(json.loads(current)["layers"]) == (2 if layout == "layers" else 1)


# On az:// a slow test: its deletes and lease conflicts also run in test_objstore.py and test_maintain.py on Azurite.
@pytest.mark.parametrize("url", ["s3", pytest.param("az", marks=pytest.mark.slow)], indirect=True)
def test_a_paused_writer_hides_its_upload_and_holds_the_lease(url, tree, tmp_path, cli, prefect_api):
    lance(url)
    assert cli("index", tree, "--db", url, env=machine(tmp_path, "writer")).returncode == 0
    edit_tree(tree)
    gate = tmp_path / "go"
    env = {
        **os.environ,
        **machine(tmp_path, "writer"),
        "QUARRY_FAULT": "pause:after-upload",
        "QUARRY_FAULT_FILE": str(gate),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "quarry.cli", "index", str(tree), "--db", url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "go.paused").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
            time.sleep(0.1)
        assert "catalog-000002.duckdb" in remote_keys(url)  # uploaded, not committed
        # a reader elsewhere reads what CURRENT names: generation 1, never the upload
        found = cli(
            "search", "kestrel budget", "--db", url, "--json", "--mode", "bm25", env=machine(tmp_path, "reader")
        )
        assert found.returncode == 0, found.stderr
        assert not [r for r in json.loads(found.stdout)["results"] if "kestrel" in r["text"]]
        # a second writer on another machine finds the lease
        busy = cli("index", tree, "--db", url, env=machine(tmp_path, "writer2"))
        assert busy.returncode == 1 and "leased by another index run" in busy.stderr, busy.stderr
        skip = cli("index", tree, "--db", url, "--if-busy", "skip", env=machine(tmp_path, "writer2"))
        assert skip.returncode == 0, skip.stderr
    finally:
        gate.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    runs = json.loads(cli("runs", "--db", url, "--json", env=machine(tmp_path, "reader")).stdout)
    assert sorted(r["status"] for r in runs) == ["completed", "completed", "skipped"]
    found = cli("search", "kestrel budget", "--db", url, "--json", "--mode", "bm25", env=machine(tmp_path, "reader"))
    assert [r for r in json.loads(found.stdout)["results"] if "kestrel" in r["text"]]


# --- the protocol in one process ------------------------------------------------------------------


def _pointer(generation: int) -> Pointer:
    return Pointer(
        generation=generation,
        catalog=Pointer.catalog_name(generation),
        vector_table="",
        vector_version=0,
        model="m",
        dim=4,
        committed_at=time.time(),
    )


def test_the_lease_excludes_a_writer_with_another_cache(url, tmp_path, monkeypatch):
    here = local_dir(url)
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "elsewhere"))
    there = local_dir(url)
    assert here != there
    with WriterLock(here):
        with pytest.raises(StoreLocked, match="leased by another index run"):
            WriterLock(there).acquire()
    WriterLock(there).acquire().release()


@pytest.mark.parametrize("committed_before", [False, True])
def test_a_pointer_moved_behind_the_writer_fails_its_commit(url, committed_before):
    opened = open_store(url)  # the lock and the commit below, given its folder, find this same object
    store, remote = opened.folder, opened.remote
    conditional(remote.objects)
    if committed_before:
        (store / "catalog-000001.duckdb").write_bytes(b"one")
        with WriterLock(store):
            write_pointer(store, _pointer(1))
    with WriterLock(store):
        # another writer (whose lease this one never saw: moto's puts are not atomic) commits
        theirs = json.dumps({**_pointer(9).__dict__}).encode()
        remote.objects.put("CURRENT", theirs)
        mine = _pointer(2 if committed_before else 1)
        (store / mine.catalog).write_bytes(b"mine")
        with pytest.raises(QuarryError, match="changed while this run held the lease"):
            write_pointer(store, mine)
        assert not (store / mine.catalog).exists()  # never mistaken for the other writer's files
    assert remote.objects.get("CURRENT")[0] == theirs
    assert mine.catalog not in remote.objects.list("")


def test_an_empty_bucket_is_named_by_its_url(url, cli, tmp_path):
    done = cli("search", "anything", "--db", url, env=machine(tmp_path, "reader"))
    assert done.returncode == 1
    assert f"no index at {url}: run `quarry index PATH --db {url}` first" in done.stderr


def test_a_reader_may_trust_current_for_a_while(url):
    opened = open_store(url)  # the lock and the commit below, given its folder, find this same object
    store, remote = opened.folder, opened.remote
    for generation in (1, 2):
        (store / Pointer.catalog_name(generation)).write_bytes(b"catalog")
        with WriterLock(store):
            write_pointer(store, _pointer(generation))
        if generation == 1:
            assert remote.pull(store).generation == 1
    assert remote.pull(store, max_age=3600).generation == 1  # QUARRY_REMOTE_CHECK_SECONDS=3600: no GET
    assert remote.pull(store, max_age=0).generation == 2


def test_a_reader_elsewhere_gets_the_committed_files(url, tmp_path, monkeypatch):
    store = local_dir(url)
    files = {
        "catalog-000001.duckdb": os.urandom(3000),
        "index-000001/vectors.f32": os.urandom(5000),
        "index-000001/bm25/terms.json": b'{"kestrel": 1}',
    }
    for name, data in files.items():
        (store / name).parent.mkdir(parents=True, exist_ok=True)
        (store / name).write_bytes(data)
    with WriterLock(store):
        write_pointer(store, _pointer(1))
    assert {k for k in remote_keys(url) if k != "CURRENT"} == set(files)
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "elsewhere"))
    there = open_store(url)
    assert there.folder != store and there.remote is not None
    assert there.remote.pull(there.folder).generation == 1
    assert {name: (there.folder / name).read_bytes() for name in files} == files


@pytest.mark.parametrize("committed_before", [False, True])
def test_a_commit_whose_answer_was_lost_is_committed(url, committed_before):
    from test_objstore import AnswerLost

    opened = open_store(url)  # the lock and the commit below, given its folder, find this same object
    store, remote = opened.folder, opened.remote
    if committed_before:
        (store / "catalog-000001.duckdb").write_bytes(b"one")
        with WriterLock(store):
            write_pointer(store, _pointer(1))
    mine = _pointer(2 if committed_before else 1)
    with WriterLock(store):
        remote._objects = lost_answer = AnswerLost(remote.objects, "CURRENT")
        try:
            (store / mine.catalog).write_bytes(b"mine")
            write_pointer(store, mine)  # the put landed; its retry's 412 is our own write
        finally:
            remote._objects = lost_answer.inner
    assert lost_answer.fired
    assert remote.read_pointer()[0] == mine
    assert mine.catalog in remote.objects.list("") and (store / mine.catalog).is_file()
