"""The store's commit point, reader isolation, crash recovery and the writer lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from quarry.core.errors import StoreLocked, StoreNotFound
from quarry.core.models import Chunk, DocumentRecord, FileInfo, Section
from quarry.store.layout import WriterLock, require_pointer
from quarry.store.pointer import read_pointer
from quarry.store.reader import open_snapshot
from quarry.store.writer import StoreWriter

DIM = 8


def record(doc_id: str, text: str, path: str | None = None) -> DocumentRecord:
    file = FileInfo(
        path=path or f"/r/{doc_id}.md",
        root="/r",
        rel_path=f"{doc_id}.md",
        file_type="md",
        size=len(text),
        mtime=1.0,
        sha256=doc_id * 2,
    )
    chunk = Chunk(
        chunk_id=f"{doc_id}:0",
        doc_id=doc_id,
        section_index=0,
        chunk_index=0,
        start=0,
        end=len(text),
        page_start=None,
        page_end=None,
        header="Document: T",
        text=text,
        text_hash=(doc_id * 8)[:64],
        n_tokens=3,
    )
    return DocumentRecord(
        doc_id=doc_id, file=file, title="T", summary="", sections=[Section(0, "S", 1, 0, len(text))], chunks=[chunk]
    )


def vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def run_row(run_id="r1"):
    import datetime as dt

    return {
        "run_id": run_id,
        "started": dt.datetime.now(),
        "status": "completed",
        "roots": ["/r"],
        "errors": [],
        "durations": {},
        "settings": {},
    }


def write(store, docs, run_id="r1", commit=True):
    w = StoreWriter(store, "test-model", DIM).open()
    try:
        w.write_documents(docs, {d.chunks[0].text_hash: vec(i) for i, d in enumerate(docs)}, run_id)
        if commit:
            w.commit(run_row(run_id), {})
    finally:
        w.close()


def chunk_count(store):
    snap = open_snapshot(store)
    try:
        return snap.con.execute("SELECT count(*) FROM chunks").fetchone()[0], snap.table.count_rows()
    finally:
        snap.close()


def test_no_store_is_a_clear_error(tmp_path):
    with pytest.raises(StoreNotFound, match="quarry index"):
        require_pointer(tmp_path / "nothing")


def test_commit_makes_a_run_visible_whole(tmp_path):
    store = tmp_path / "s"
    write(store, [record("aa", "alpha"), record("bb", "beta")])
    assert chunk_count(store) == (2, 2)
    p = read_pointer(store)
    assert p.generation == 1 and p.model == "test-model" and p.dim == DIM
    assert sorted(x.name for x in store.glob("catalog-*")) == [p.catalog]


def test_uncommitted_work_is_invisible_and_rolled_back(tmp_path):
    store = tmp_path / "s"
    write(store, [record("aa", "alpha")])
    committed = read_pointer(store)
    reader = open_snapshot(store)
    # A run that writes and dies without committing (no commit, no cleanup of its files).
    w = StoreWriter(store, "test-model", DIM).open()
    w.write_documents(
        [record("bb", "beta"), record("cc", "gamma")], {("bb" * 8)[:64]: vec(1), ("cc" * 8)[:64]: vec(2)}, "r2"
    )
    assert reader.con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1
    assert reader.table.count_rows() == 1
    w.lock.release()  # simulate the process dying: the catalog file stays behind
    w.con.close()
    assert read_pointer(store) == committed
    reader.close()
    # The next run starts from the committed state: the dead run's rows are gone.
    write(store, [record("dd", "delta")], run_id="r3")
    snap = open_snapshot(store)
    ids = sorted(r[0] for r in snap.con.execute("SELECT doc_id FROM documents").fetchall())
    lance_ids = sorted(snap.table.to_arrow().column("doc_id").to_pylist())
    snap.close()
    assert ids == lance_ids == ["aa", "dd"]
    # the dead run's catalog was replaced; generation 1 stays, kept for `quarry rollback`
    assert sorted(p.name for p in store.glob("catalog-*.duckdb")) == ["catalog-000001.duckdb", "catalog-000002.duckdb"]


def test_a_catalog_only_snapshot_reads_the_catalog_and_refuses_the_search_index(tmp_path):
    """What a run's plan opens: the committed catalog, without mapping the search index."""
    store = tmp_path / "s"
    write(store, [record("aa", "alpha"), record("bb", "beta")])
    snap = open_snapshot(store, search_index=False)
    try:
        assert snap.con.execute("SELECT count(*) FROM documents").fetchone()[0] == 2
        assert snap.index_manifest is None
        with pytest.raises(RuntimeError, match="without its search index"):
            _ = snap.index
    finally:
        snap.close()
    full = open_snapshot(store)
    try:
        assert full.index_manifest is not None and full.index is not None
    finally:
        full.close()


def test_vector_cache_lookup_and_replace(tmp_path):
    store = tmp_path / "s"
    write(store, [record("aa", "alpha")])
    w = StoreWriter(store, "test-model", DIM).open()
    try:
        found = w.lookup_vectors([("aa" * 8)[:64], "f" * 64])
        assert list(found) == [("aa" * 8)[:64]]
        np.testing.assert_allclose(found[("aa" * 8)[:64]], vec(0), rtol=1e-6)
        w.write_documents([record("aa", "alpha v2")], {("aa" * 8)[:64]: vec(5)}, "r2")  # same doc: replaced
        w.commit(run_row("r2"), {})
    finally:
        w.close()
    assert chunk_count(store) == (1, 1)


def test_model_change_uses_a_new_table_and_drops_the_old(tmp_path):
    store = tmp_path / "s"
    write(store, [record("aa", "alpha")])
    w = StoreWriter(store, "other-model", DIM).open()
    try:
        assert w.model_changed and w.lookup_vectors([("aa" * 8)[:64]]) == {}
        w.write_documents([record("aa", "alpha")], {("aa" * 8)[:64]: vec(0)}, "r2")
        w.commit(run_row("r2"), {})
    finally:
        w.close()
    p = read_pointer(store)
    assert p.model == "other-model" and "other_model" in p.vector_table


def test_second_writer_fails_fast_naming_the_holder(tmp_path):
    store = tmp_path / "s"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from quarry.store.layout import WriterLock
            WriterLock(Path({str(store)!r})).acquire()
            print("locked", flush=True)
            time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLocked, match=f"pid {holder.pid}"):
            WriterLock(store).acquire()
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the dead holder's lock: no stale lock to clean up by hand.
    WriterLock(store).acquire().release()


def _locked_elsewhere(store) -> bool:
    """Whether another process finds the store locked."""
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from quarry.store.layout import WriterLock\n"
        "try:\n    WriterLock(Path(sys.argv[1])).acquire()\nexcept Exception:\n    sys.exit(7)"
    )
    return subprocess.run([sys.executable, "-c", code, str(store)], timeout=60).returncode == 7


def test_lock_is_reentrant_within_a_process(tmp_path):
    a, b = WriterLock(tmp_path), WriterLock(tmp_path)
    a.acquire()
    b.acquire()  # the CLI and the flow both take it: a second acquire must not deadlock
    b.release()
    assert _locked_elsewhere(tmp_path)  # still held: one release of two
    a.release()
    assert not _locked_elsewhere(tmp_path)  # released for real


def test_compaction_and_pruning_keep_the_committed_rows(tmp_path):
    from quarry.store import vectors

    store = tmp_path / "s"
    for i in range(4):  # four runs: four fragments
        write(store, [record(f"{i}a", f"text {i}")], run_id=f"r{i}")
    w = StoreWriter(store, "test-model", DIM).open()
    try:
        before = w.table.count_rows()
        vectors.compact(w.table, max_fragments=1)
        assert w.table.stats()["fragment_stats"]["num_fragments"] == 1
        w.commit(run_row("r9"), {})
        vectors.prune(w.table)
    finally:
        w.close()
    assert chunk_count(store) == (before, before) == (4, 4)


@pytest.mark.parametrize("model", ["test-model", "other-model"])  # the committed table, and a new one
def test_a_batch_retried_after_a_catalog_failure_is_written_once(tmp_path, monkeypatch, model):
    # The writer deletes from LanceDB only the documents it may hold (catalog, or an earlier failed
    # write); a batch whose vectors were added but whose catalog write failed must not leave two copies.
    from quarry.store import layers as catalog  # a run over a committed store writes a catalog layer

    store = tmp_path / "s"
    write(store, [record("aa", "alpha")])
    w = StoreWriter(store, model, DIM).open()
    try:
        real = catalog.replace_documents
        monkeypatch.setattr(catalog, "replace_documents", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
        batch = [record("aa", "alpha v2"), record("bb", "beta")]
        vecs = {("aa" * 8)[:64]: vec(1), ("bb" * 8)[:64]: vec(2)}
        with pytest.raises(OSError):
            w.write_documents(batch, vecs, "r2")
        monkeypatch.setattr(catalog, "replace_documents", real)
        w.write_documents(batch, vecs, "r2")  # what load_batch's retry does
        assert w.table.count_rows() == 2
        w.write_documents([record("bb", "beta v2")], {("bb" * 8)[:64]: vec(3)}, "r2")  # written twice in one run
        w.commit(run_row("r2"), {})
    finally:
        w.close()
    snap = open_snapshot(store)
    lance_ids = sorted(snap.table.to_arrow().column("doc_id").to_pylist())
    texts = sorted(r[0] for r in snap.con.execute("SELECT text FROM chunks").fetchall())
    snap.close()
    assert lance_ids == ["aa", "bb"] and texts == ["alpha v2", "beta v2"]


def test_the_writer_caps_duckdb_while_loading_and_lifts_the_cap_at_commit(tmp_path, monkeypatch):
    import duckdb

    from quarry.store import upkeep

    monkeypatch.setattr(upkeep, "LOAD_MEMORY_LIMIT", "16MB")
    w = StoreWriter(tmp_path / "s", "test-model", DIM).open()
    try:
        w.con.execute("CREATE TEMP TABLE big AS SELECT repeat('x', 200) || i::VARCHAR AS s FROM range(300000) t(i)")
        query = "SELECT s FROM big ORDER BY s DESC"  # ~60 MB sorted in memory
        with pytest.raises(duckdb.OutOfMemoryException):
            w.con.execute(query).fetch_arrow_table()
        w.lift_cache_cap()
        assert w.con.execute(query).fetch_arrow_table().num_rows == 300000
    finally:
        w.close()


def test_rows_arrow_written_in_batches_holds_the_table_built_whole(tmp_path):
    from quarry.retrieval import rows, searchindex
    from quarry.store import catalog

    con = catalog.create(tmp_path / "c.duckdb")
    catalog.replace_documents(con, [record(f"{i:02x}", f"text {i}") for i in range(50)], "r1")
    searchindex.use_source(con, "main")
    ids, row_docs = rows.write_rows(con, tmp_path / rows.ROWS, batch_rows=7)
    written, whole = rows.load(tmp_path / rows.ROWS), rows.build_rows(con)
    con.close()
    assert written.column("chunk_id").num_chunks > 1
    assert written.schema == whole.schema and written.equals(whole)
    assert ids.equals(whole.column("chunk_id").combine_chunks()) and row_docs.equals(whole.column("doc_id"))


def test_moves_find_their_rows_through_the_chunk_id_index_old_rows_and_new(tmp_path, monkeypatch):
    # A commit keeps a BTREE index on chunk_id once the table is big enough (2 rows here), so a
    # run's moves do not read the whole table; rows added after the index was built are still found.
    import pyarrow as pa

    from quarry.store import vectors

    monkeypatch.setenv("QUARRY_KEY_INDEX_ROWS", "2")
    store = tmp_path / "s"
    write(store, [record(f"{i}a", f"text {i}") for i in range(3)])
    w = StoreWriter(store, "test-model", DIM).open()
    try:
        indexes = {tuple(i.columns): i for i in w.table.list_indices()}
        assert set(indexes) == {("chunk_id",), ("text_hash",)}
        index = indexes[("chunk_id",)]
        assert w.table.index_stats(index.name).num_unindexed_rows == 0
        w.write_documents([record("3a", "text 3")], {("3a" * 8)[:64]: vec(3)}, "r2")
        assert w.table.index_stats(index.name).num_unindexed_rows == 1
        # the embedding cache finds indexed rows and rows added after the index alike
        found = vectors.lookup_vectors(w.table, [("0a" * 8)[:64], ("3a" * 8)[:64], "f" * 64])
        assert sorted(found) == sorted([("0a" * 8)[:64], ("3a" * 8)[:64]])
        assert np.allclose(found[("3a" * 8)[:64]], vec(3))
        moved = pa.table({"chunk_id": ["0a:0", "3a:0"], "path": ["/r/moved/0a.md", "/r/moved/3a.md"]})
        vectors.move_documents(w.table, moved)
        paths = dict(zip(*w.table.to_arrow().select(["chunk_id", "path"]).to_pydict().values()))
        assert paths == {"0a:0": "/r/moved/0a.md", "1a:0": "/r/1a.md", "2a:0": "/r/2a.md", "3a:0": "/r/moved/3a.md"}
        # the merge rewrote its fragment, so no row is indexed now: past the bound, built again over all
        assert vectors.index_keys(w.table) is True
        assert w.table.index_stats(index.name).num_unindexed_rows == 0
        assert vectors.index_keys(w.table) is False
    finally:
        w.close()


def test_a_small_table_has_no_chunk_id_index(tmp_path):
    store = tmp_path / "s"
    write(store, [record("aa", "alpha")])
    snap = open_snapshot(store)
    try:
        assert snap.table.list_indices() == []
    finally:
        snap.close()


def test_a_store_with_more_than_ten_vector_tables_finds_each(tmp_path):
    # LanceDB's table_names() stops at ten: an eleventh model's table must still be found, not created again
    from quarry.store import vectors

    store = tmp_path / "s"
    for i in range(12):
        vectors.open_for_write(store, f"model-{i:02d}", DIM, 0).add(vectors.rows_table(f"model-{i:02d}", DIM, [], {}))
    names = vectors.table_names(vectors.connect(store))
    assert len(names) == 12
    table = vectors.open_for_write(store, "model-11", DIM, 1)  # committed at its version 1: opened, not created
    assert table.name == vectors.table_name("model-11", DIM)
    assert vectors.drop_unreferenced(store, {vectors.table_name("model-00", DIM)}) == sorted(names)[1:]
