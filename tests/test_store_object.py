"""The store object (quarry/store/handle.py): a store is opened once, from a folder or a URL, and the
lock, the writer, the journal, the doctor, maintenance, rollback and the readers are handed it."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from conftest import SAMPLE
from test_crash import edit_tree

import quarry
from quarry.core.errors import StoreCorrupt, StoreLocked
from quarry.core.storeurl import MARKER, parse_url
from quarry.store import journal, maintain
from quarry.store.doctor import diagnose
from quarry.store.handle import Store, as_store, open_store
from quarry.store.layout import WriterLock, write_pointer
from quarry.store.objstore import open_objects
from quarry.store.pointer import Pointer, read_pointer
from quarry.store.remote import Remote
from quarry.store.rollback import list_generations, rollback


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


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


def test_a_local_folder_opens_as_a_local_store_once(tmp_path):
    store = open_store(tmp_path / "db")
    assert isinstance(store, Store) and store.remote is None and not store.is_remote and store.url is None
    assert store.folder == tmp_path / "db" and store.name == str(tmp_path / "db")
    assert open_store(str(tmp_path / "db")) is store  # opened once per process
    assert as_store(tmp_path / "db") is store  # a function handed the folder finds the same object
    assert open_store(store) is store and as_store(store) is store


def test_a_url_opens_as_a_remote_store_with_its_backend(tmp_path, cache):
    url = f"file://{tmp_path}/objects/store"
    store = open_store(url)
    assert isinstance(store.remote, Remote) and store.is_remote
    assert store.url == parse_url(url) and store.name == url
    assert store.folder.parent == cache
    assert json.loads((store.folder / MARKER).read_text())["url"] == url
    assert type(store.remote.objects).__module__ == "quarry.store.objstore.local"  # from the scheme registry
    # one Remote per store in a process: the lease the lock takes is the one the commit checks
    assert as_store(store.folder) is store and open_store(url) is store


def test_a_cache_folder_opened_by_its_path_is_the_remote_store(tmp_path, cache):
    url = f"file://{tmp_path}/objects/store"
    folder = open_store(url).folder
    shutil.copytree(folder, tmp_path / "copy")  # a folder never opened in this process, with its marker
    copy = as_store(tmp_path / "copy")
    assert copy.remote is not None and copy.name == url


def test_a_url_replaces_a_local_store_opened_at_its_folder_before_it_was_marked(tmp_path, cache):
    import hashlib

    url = f"file://{tmp_path}/objects/store"
    folder = cache / hashlib.sha256(url.encode()).hexdigest()[:16]  # quarry.core.storeurl.local_dir's folder
    assert as_store(folder).remote is None  # no marker yet: a local folder
    store = open_store(url)
    assert store.folder == folder and store.remote is not None and as_store(folder) is store


def test_a_damaged_marker_names_the_file(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / MARKER).write_text("{not json")
    with pytest.raises(StoreCorrupt, match=f"{tmp_path / 'db' / MARKER} is damaged"):
        open_store(tmp_path / "db")


def test_the_object_decides_where_the_lock_the_commit_and_the_journal_go(tmp_path):
    """A Store built by hand, over a folder with no REMOTE marker: only the object says it is remote,
    so the lease, the commit and the journal reach the object store only if they use the object."""
    objects_url = f"file://{tmp_path}/objects"
    store = Store(tmp_path / "work", Remote(parse_url(objects_url)))
    store.folder.mkdir()
    objects = open_objects(parse_url(objects_url))
    with WriterLock(store):
        assert objects.get("lease") is not None  # the lease, beside the flock
        (store.folder / "catalog-000001.duckdb").write_bytes(b"catalog")
        write_pointer(store, _pointer(1))
    assert json.loads(objects.get("CURRENT")[0])["generation"] == 1
    assert objects.list("catalog-") == ["catalog-000001.duckdb"]
    assert read_pointer(store.folder).generation == 1  # the local CURRENT follows the remote one
    journal.record(store, {"run_id": "r1", "started": "2026-01-01T00:00:00"})
    assert objects.list("journal/") == ["journal/r1.json"] and not (store.folder / journal.JOURNAL).exists()
    assert [row["run_id"] for row in journal.pending(store)] == ["r1"]
    # the same folder as a plain local store: nothing reaches the object store
    local = Store(tmp_path / "work")
    journal.record(local, {"run_id": "r2", "started": "2026-01-01T00:00:01"})
    assert (local.folder / journal.JOURNAL).is_file() and objects.list("journal/") == ["journal/r1.json"]


def test_a_second_cache_of_one_url_is_refused_by_the_lease(tmp_path, monkeypatch):
    url = f"file://{tmp_path}/objects/store"
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "here"))
    here = open_store(url)
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "there"))
    there = open_store(url)
    assert here is not there and here.remote is not there.remote
    with WriterLock(here), pytest.raises(StoreLocked, match="leased by another index run"):
        WriterLock(there).acquire()
    WriterLock(there).acquire().release()


def test_doctor_maintenance_rollback_and_readers_take_the_object(tmp_path, cache, run_flow):
    url = f"file://{tmp_path}/objects/store"
    shutil.copytree(SAMPLE, tmp_path / "tree")
    run_flow([tmp_path / "tree"], url)
    edit_tree(tmp_path / "tree")
    run_flow([tmp_path / "tree"], url)
    store = open_store(url)
    assert store.remote is not None

    report = diagnose(store)
    assert report.healthy, report.to_dict()
    assert report.store == str(store.folder)
    done = maintain.maintain(store, generations=2)
    assert done["store"] == url and done["status"] == "completed" and done["check"]["healthy"]
    generation = done["generation"]
    assert [g["generation"] for g in list_generations(store)][0] == generation
    back = rollback(store)
    assert back["generation"] == generation + 1
    assert json.loads(open_objects(parse_url(url)).get("CURRENT")[0])["generation"] == generation + 1
    with quarry.open(store) as idx:
        assert idx.status()["store"] == url and idx.status()["generation"] == generation + 1
        assert idx.search("expenses", k=1).results
