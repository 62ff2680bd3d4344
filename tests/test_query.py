"""Search through quarry.open on real stores: filters inside both retrievers, fusion knobs and
--explain fields, hostile input, the warm API across commits, vector search methods."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os

import numpy as np
import pytest
from conftest import shared

import quarry.search.query
from quarry.core.errors import UsageError
from quarry.core.models import Chunk, DocumentRecord, FileInfo, Section, join_header
from quarry.core.settings import Settings
from quarry.ingest.embedders.hashing import HashEmbedder
from quarry.search.filters import Filter
from quarry.store.pointer import read_pointer
from quarry.store.writer import StoreWriter

DIM = 64
EMB = HashEmbedder(DIM)
SETTINGS = Settings.from_env(embed_backend="hash", embed_dim=DIM)
DAY = 86400.0
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()


def doc(name, texts, file_type="md", mtime=T0, metadata=None, folder="docs", pages=None) -> DocumentRecord:
    doc_id = hashlib.sha256(name.encode()).hexdigest()[:20]
    rel = f"{folder}/{name}.{file_type}"
    file = FileInfo(
        path=f"/r/{rel}",
        root="/r",
        rel_path=rel,
        file_type=file_type,
        size=100,
        mtime=mtime,
        sha256=hashlib.sha256(f"{name}{texts}".encode()).hexdigest(),
    )
    chunks, pos = [], 0
    for i, text in enumerate(texts):
        header = f"Document: {name}"
        page = pages[i] if pages else None
        chunks.append(
            Chunk(
                f"{doc_id}:{i}",
                doc_id,
                0,
                i,
                pos,
                pos + len(text),
                page,
                page,
                header,
                text,
                hashlib.sha256(join_header(header, text).encode()).hexdigest(),
                10,
            )
        )
        pos += len(text) + 1
    return DocumentRecord(doc_id, file, name, "", [Section(0, "Intro", 1, 0, pos)], chunks, metadata=metadata or {})


def commit(store, records=(), moves=(), run_id="r"):
    w = StoreWriter(store, EMB.model, DIM).open()
    try:
        chunks = [c for r in records for c in r.chunks]
        vecs = dict(zip([c.text_hash for c in chunks], EMB.embed([c.embed_text for c in chunks]))) if chunks else {}
        w.write_documents(list(records), vecs, run_id)
        for doc_id, path in moves:
            w.move_document(doc_id, path, "/r", path.removeprefix("/r/"), dt.datetime(2024, 1, 1), run_id)
        w.commit(
            {
                "run_id": run_id,
                "started": dt.datetime.now(),
                "status": "completed",
                "roots": ["/r"],
                "errors": [],
                "durations": {},
                "settings": {},
            },
            {},
        )
    finally:
        w.close()


FILLER = (
    "The team reviews the quarterly plan, checks the release notes and writes down what changed "
    "since the last meeting so that everyone can follow the decisions."
)


def make_store(path):
    """60 Markdown documents full of 'alpha', one text file that mentions it once, a PDF."""
    records = [
        doc(
            f"md{i:02d}",
            [f"alpha alpha beta {FILLER}", f"gamma delta {i} {FILLER}"],
            metadata={"team": "web"},
            mtime=T0 + i * DAY,
        )
        for i in range(60)
    ]
    records.append(
        doc(
            "note",
            [f"An aside: alpha appears here once. {FILLER} Error E11000 in FY2018."],
            "txt",
            metadata={"team": "db"},
            folder="notes/sub",
            mtime=T0 + 100 * DAY,
        )
    )
    records.append(
        doc(
            "paper",
            ["Levels of AGI: performance and generality.", "Autonomy and risk, alpha."],
            "pdf",
            pages=[1, 2],
            mtime=T0 + 200 * DAY,
        )
    )
    commit(path, records)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store that tests only read."""
    return make_store(tmp_path_factory.mktemp("store") / "s")


@pytest.fixture
def fresh_store(tmp_path):
    """A store a test may change."""
    return make_store(tmp_path / "s")


def open_index(store, **kwargs):
    return quarry.search.query.open(store, SETTINGS, **kwargs)


def titles(response):
    return [r.title for r in response.results]


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_filters_apply_inside_both_retrievers(store, mode):
    with open_index(store) as idx:
        unfiltered = idx.search("alpha", k=5, mode=mode, candidates=5)
        assert "note" not in titles(unfiltered)
        only_txt = idx.search("alpha", k=5, mode=mode, candidates=5, filters=Filter.build(file_type="txt"))
        assert titles(only_txt) == ["note"]  # found though it ranks far below the top 5 unfiltered
        assert only_txt.counts["kept"] == 1 and only_txt.filter


@pytest.mark.parametrize("where", ["file_type = 'pdf'", "file_type=pdf", "file_type = pdf"])
def test_where_spellings_agree(store, where):
    with open_index(store) as idx:
        hits = idx.search("alpha performance", k=10, filters=Filter.build(where=[where]))
    assert {r.title for r in hits.results} == {"paper"} and {r.file_type for r in hits.results} == {"pdf"}


@pytest.mark.parametrize(
    "filters, expected",
    [
        (Filter.build(where=["metadata.team = db"]), {"note"}),
        (Filter.build(where=["metadata.team IN (db, nobody)", "file_type != md"]), {"note"}),
        (Filter.build(path=["notes"]), {"note"}),
        (Filter.build(path=["*/sub/*.txt"]), {"note"}),
        (Filter.build(path=["/r/docs/md0*.md"]), {f"md{i:02d}" for i in range(10)}),
        (Filter.build(since="2024-02-25", until="2024-03-01"), {"md55", "md56", "md57", "md58", "md59"}),
        (Filter.build(since=dt.date(2024, 7, 1)), {"paper"}),
        (Filter.build(where=["page = 2"]), {"paper"}),
        (Filter.build(where=["chunk_index = 1", "mtime < 2024-01-03"]), {"md00", "md01"}),
        (
            Filter.build(where=["section = Intro", "title LIKE 'md0%'", "size >= 100"]),
            {f"md{i:02d}" for i in range(10)},
        ),
        (Filter.build(file_type=["pdf", "txt"]), {"note", "paper"}),
        (Filter.build(doc_id=hashlib.sha256(b"md07").hexdigest()[:20]), {"md07"}),
    ],
)
def test_filters_select_by_metadata_path_date_page_and_id(store, filters, expected):
    with open_index(store) as idx:
        found = {r.title for r in idx.search("alpha gamma the", k=200, filters=filters).results}
    assert found == expected


def test_pages_come_back_one_based(store):
    with open_index(store) as idx:
        hits = idx.search("autonomy risk", k=1, filters=Filter.build(file_type="pdf")).results
    assert (hits[0].page_start, hits[0].page_end, hits[0].chunk_index) == (2, 2, 1)


HOSTILE = [
    "'; DROP TABLE chunks; --",
    'x" OR 1=1 --',
    "file_type = 'pdf'' OR 1=1 --'",
    "*/../*",
    "%' OR '1'='1",
    "\\x00 ; DELETE FROM documents",
    "metadata.a = 1) OR (1=1",
]


def test_hostile_input_is_data_and_the_store_stays_intact(store):
    with open_index(store) as idx:
        before = idx.status()
        for text in HOSTILE:
            idx.search(text, k=5)  # query text: only ever BM25 tokens and an embedding
            assert idx.search("alpha", k=5, filters=Filter.build(path=[text], doc_id=[text])).results == []
            assert idx.search("alpha", k=5, filters=Filter.build(where=[f"title = {text!r}"])).results == []
            try:
                hits = idx.search("alpha", k=5, filters=Filter.build(where=[text]))
            except UsageError:
                continue
            assert hits.results == []
        assert idx.search("alpha", k=5, filters="file_type = 'pdf'' OR 1=1 --'").results == []
        with pytest.raises(UsageError):
            idx.search("alpha", filters=Filter.build(where=["metadata.x') OR 1=1 -- = 1"]))
        after = idx.status()
        assert (after["documents"], after["chunks"]) == (before["documents"], before["chunks"]) == (62, 123)
        assert idx.search("alpha", k=3).results


def test_fusion_is_explained_and_tunable(store):
    with open_index(store) as idx:
        hybrid = idx.search("alpha beta", k=5, fusion="rrf", rrf_k=10, weights={"vector": 0.5, "bm25": 2})
        for r in hybrid.results:
            expected = sum(w / (10 + r.ranks[name]) for name, w in (("vector", 0.5), ("bm25", 2.0)) if r.ranks[name])
            assert r.fused == pytest.approx(expected) == pytest.approx(r.score)
            assert set(r.scores) == set(r.ranks) == {"vector", "bm25"}
        assert hybrid.weights == {"vector": 0.5, "bm25": 2.0} and hybrid.rrf_k == 10 and hybrid.fusion == "rrf"
        assert set(hybrid.timings) >= {"filter", "vector", "bm25", "fuse", "hydrate", "total"}
        bm25_only = idx.search("alpha beta", k=5, weights={"vector": 0})
        assert [r.chunk_id for r in bm25_only.results] == [
            r.chunk_id for r in idx.search("alpha beta", k=5, mode="bm25").results
        ]
        assert all(r.ranks["vector"] is None for r in bm25_only.results) and "vector" not in bm25_only.timings
        cut = idx.search("alpha beta", k=5, min_scores={"bm25": 1e9})
        assert cut.counts["bm25"] == 0 and all(r.ranks["bm25"] is None for r in cut.results)
        assert idx.search("alpha beta", k=5, fusion="rrf", min_scores={"fused": 1.0}).results == []
        assert idx.search("alpha beta", k=5, min_scores={"fused": 1.01}).results == []  # tmm: fused <= 1
        small = idx.search("alpha beta", k=3, candidates=4)
        assert small.candidates == 4 and small.counts["vector"] == small.counts["bm25"] == 4
        single = idx.search("alpha", k=3, mode="bm25")
        assert single.results[0].fused is None and single.results[0].score == single.results[0].scores["bm25"]


def test_default_fusion_is_tmm_over_the_raw_scores(store):
    from quarry.search.fusion import fuse

    with open_index(store) as idx:
        hybrid = idx.search("alpha beta", k=5, candidates=20)
        assert hybrid.fusion == "tmm"
        vec = idx.vector_search("alpha beta", 20)
        bm = idx.bm25_search("alpha beta", 20)
        expected = fuse({"vector": vec, "bm25": bm}, "tmm", depth=20)[:5]
        assert [(r.chunk_id, r.fused) for r in hybrid.results] == [(c, pytest.approx(s)) for c, s in expected]
        assert all(0.0 <= r.fused <= 1.0 and r.score == r.fused for r in hybrid.results)
        assert idx.search("alpha", k=3, mode="bm25").fusion == ""


def test_ties_break_by_chunk_id_every_time(store):
    with open_index(store) as idx:
        first = [r.chunk_id for r in idx.search("alpha alpha beta", k=20, mode="bm25").results]
        again = [r.chunk_id for r in idx.search("alpha alpha beta", k=20, mode="bm25").results]
        hybrid = [[r.chunk_id for r in idx.search("alpha alpha beta", k=20).results] for _ in range(2)]
    assert first == again == sorted(first)  # 60 identical chunks: equal scores, chunk id order
    assert hybrid[0] == hybrid[1] and len(hybrid[0]) == 20  # fused ties break the same way every time


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "fuzzy"}, "unknown search mode"),
        ({"k": 0}, "k must be"),
        ({"candidates": 0}, "candidates"),
        ({"rrf_k": -1}, "rrf_k"),
        ({"fusion": "combsum"}, "unknown fusion"),
        ({"weights": {"dense": 1}}, "unknown key dense"),
        ({"weights": {"bm25": -1}}, "at least 0"),
        ({"weights": {"bm25": "x"}}, "must be a number"),
        ({"min_scores": {"rerank": 1}}, "unknown key rerank"),
        ({"filters": "nosuch = 1"}, "unknown column"),
    ],
)
def test_bad_arguments_are_usage_errors(store, kwargs, message):
    with open_index(store) as idx, pytest.raises(UsageError, match=message):
        idx.search("alpha", **kwargs)


def test_warm_index_follows_commits_and_never_sees_half_written_state(fresh_store):
    from quarry.retrieval import searchindex

    store = fresh_store
    with open_index(store) as idx:
        assert idx.search("zebra", k=3, mode="bm25").results == []
        # A run that wrote its rows and its index files but has not moved CURRENT yet.
        w = StoreWriter(store, EMB.model, DIM).open()
        record = doc("zoo", ["A zebra walks in."])
        w.write_documents([record], {record.chunks[0].text_hash: EMB.embed(["x"])[0]}, "r2")
        w._write_search_index()
        assert (store / searchindex.folder_name(w.generation)).exists()
        assert idx.search("zebra", k=3, mode="bm25").results == []
        w.close()
        commit(store, [doc("zoo", ["A zebra walks in."])], run_id="r3")
        assert titles(idx.search("zebra", k=3, mode="bm25")) == ["zoo"]
        current = read_pointer(store).generation  # the dead run's folder went; what kept generations read stays
        from quarry.store.generations import referenced

        assert sorted(p.name for p in store.glob("index-*")) == [
            searchindex.folder_name(g) for g in sorted(referenced(store, current))
        ]
        # A move changes no chunk: the base's segment stays as it is (same files); the new layer holds
        # the moved document's row, and results show the new path.
        base = store / searchindex.folder_name(read_pointer(store).layers[0])
        inode = os.stat(base / "bm25.rows.npy").st_ino
        zoo_id = hashlib.sha256(b"zoo").hexdigest()[:20]
        commit(store, moves=[(zoo_id, "/r/moved/zoo.md")], run_id="r4")
        hit = idx.search("zebra", k=1).results[0]
        assert hit.path == "/r/moved/zoo.md"
        pointer = read_pointer(store)
        assert pointer.layers[0] == int(base.name[6:]) and os.stat(base / "bm25.rows.npy").st_ino == inode
        manifest = json.loads((store / searchindex.folder_name(pointer.generation) / "index.json").read_text())
        assert manifest["segments"][-1]["rows"] <= 1 and manifest["rows"] == idx.status()["chunks"]


def test_store_without_index_files_is_indexed_in_memory(fresh_store):
    import shutil

    store = fresh_store
    shutil.rmtree(next(store.glob("index-*")))
    with open_index(store) as idx:
        assert titles(idx.search("E11000", k=1)) == ["note"]
        assert titles(idx.search("alpha", k=1, filters=Filter.build(file_type="pdf"))) == ["paper"]


@pytest.fixture(scope="module")
def ivf_store(tmp_path_factory):
    """300 one-chunk documents with an IVF index (built from 100 rows here, not 50,000)."""
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda", "zeta", "theta"]
    records = [doc(f"d{i:03d}", [" ".join(rng.choice(words, size=12))]) for i in range(300)]
    path = tmp_path_factory.mktemp("ivf") / "s"
    os.environ["QUARRY_IVF_MIN_ROWS"] = "100"
    try:
        commit(path, records)
    finally:
        del os.environ["QUARRY_IVF_MIN_ROWS"]
    from quarry.retrieval.dense import default_nlist

    assert f'"nlist": {default_nlist(300)}' in next(path.glob("index-*/index.json")).read_text()
    return path, records


@pytest.mark.parametrize("method", ["exact", "ivf", "binary", "auto"])
def test_vector_search_methods(ivf_store, method):
    path, records = ivf_store
    with open_index(path, vector_search=method) as idx:
        target = records[123].chunks[0]
        hits = idx.search(target.embed_text, k=5, mode="vector").results
        assert hits[0].chunk_id == target.chunk_id and hits[0].score == pytest.approx(1.0, abs=1e-5)
        kept = idx.search(target.embed_text, k=5, mode="vector", filters=Filter.build(where=["title >= d290"])).results
        assert [r.title for r in kept] and {r.title for r in kept} <= {f"d{i}" for i in range(290, 300)}


def test_committed_vectors_equal_a_whole_table_copy(ivf_store):
    """The commit reads vectors in batches into one matrix and puts IVF's storage order in place;
    the files equal what copying the whole table and then the matrix gives."""
    from quarry.retrieval import dense, searchindex
    from quarry.store import vectors
    from quarry.store.reader import open_snapshot

    path, _ = ivf_store
    folder = next(path.glob("index-*"))
    committed = {p.name: np.load(p) for p in folder.glob("*.npy") if p.name.startswith(("dense.", "ivf."))}
    snap = open_snapshot(path)
    try:
        searchindex.use_source(snap.con, "main")
        ids = searchindex.rows.build_rows(snap.con).column("chunk_id").combine_chunks()
        by_copy = searchindex._vectors_in_row_order(ids, *vectors.read_all(snap.table))
        by_batch = vectors.read_in_row_order(snap.table, ids, batch_rows=7)
        assert by_batch.dtype == np.float32 and np.array_equal(by_batch, by_copy)
        partial = vectors.read_in_row_order(snap.table, ids.take(np.arange(0, len(ids), 3)))
        assert np.array_equal(partial, by_copy[::3])  # vectors of chunks not asked for are skipped
        dense.normalise_inplace(by_copy)
        copied, _ = dense.build(by_copy.copy(), ivf_min_rows=100)
        in_place, _ = dense.build(by_copy, ivf_min_rows=100, inplace=True)
    finally:
        snap.close()
    assert in_place["dense.vectors.npy"] is by_copy
    for name, value in committed.items():
        assert np.array_equal(copied[name], value) and np.array_equal(in_place[name], value), name


def test_the_commit_saves_what_the_in_memory_build_returns(ivf_store):
    """The commit builds part by part into the folder (build_into); the in-memory build of the same
    snapshot (a store from before index files) gives the same files."""
    from functools import partial

    import pyarrow as pa

    from quarry.retrieval import searchindex
    from quarry.store import vectors
    from quarry.store.reader import open_snapshot

    path, _ = ivf_store
    folder = next(path.glob("index-*"))
    snap = open_snapshot(path)
    try:
        arrays, manifest = searchindex.build(snap.con, partial(vectors.read_in_row_order, snap.table), ivf_rows=100)
    finally:
        snap.close()
    assert sorted(arrays) == sorted(p.name for p in folder.iterdir() if p.name != searchindex.MANIFEST)
    for name, value in arrays.items():
        if isinstance(value, bytes):
            assert (folder / name).read_bytes() == value, name
        elif isinstance(value, pa.Table):
            assert searchindex.rows.load(folder / name).equals(value), name
        else:
            saved = np.load(folder / name)
            assert saved.dtype == value.dtype and np.array_equal(saved, value), name
    saved = json.loads((folder / searchindex.MANIFEST).read_text())
    assert (saved["rows"], saved["dim"], saved["dense"]["ivf"]) == (
        manifest["rows"],
        manifest["dim"],
        manifest["dense"]["ivf"],
    )


def test_permute_rows_in_place():
    from quarry.retrieval.dense import permute_rows

    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 10, 1000):
        matrix = rng.normal(size=(n, 3)).astype(np.float32)
        order = rng.permutation(n).astype(np.int32)
        want = matrix[order]
        assert np.array_equal(permute_rows(matrix, order), want)


def test_unknown_vector_search_is_a_usage_error(store):
    with pytest.raises(UsageError, match="vector search"):
        open_index(store, vector_search="hnsw")


def test_the_package_level_open_passes_index_options_through(store):
    import quarry

    with quarry.open(store, vector_search="exact") as idx:
        assert idx.vector_search_method == "exact"
    with pytest.raises(UsageError, match="vector search"):
        quarry.open(store, vector_search="hnsw")


@pytest.fixture(scope="module")
def pdf_store(tmp_path_factory):
    """The real 'Levels of AGI' PDF through quarry's parser and chunker."""
    from quarry.ingest.discover import discover
    from quarry.ingest.plan import new_doc_id
    from quarry.ingest.process import process_files

    files, _ = discover([shared("pdf", "levels_of_agi.pdf")])
    records, errors, _ = process_files([(f, new_doc_id(f)) for f in files], SETTINGS)
    assert not errors
    path = tmp_path_factory.mktemp("pdf") / "s"
    commit(path, records)
    return path, files[0]


def test_pdf_pages_match_the_parsed_page_of_each_chunk(pdf_store):
    from quarry.ingest.parsers import parse_file

    path, file = pdf_store
    parsed = parse_file(file.path, "pdf")
    with open_index(path) as idx:
        hits = idx.search("levels of autonomy and risk", k=20, filters=Filter.build(file_type="pdf")).results
    assert len(hits) == 20
    for hit in hits:
        assert 1 <= hit.page_start <= hit.page_end <= len(parsed.page_offsets)
        assert parsed.page_at(hit.start_char) == hit.page_start
        assert parsed.page_at(max(hit.start_char, hit.end_char - 1)) == hit.page_end


def test_deleted_and_changed_documents_leave_both_retrievers(fresh_store):
    store = fresh_store
    w = StoreWriter(store, EMB.model, DIM).open()
    try:
        w.delete_documents([hashlib.sha256(b"note").hexdigest()[:20]])
        w.commit(
            {
                "run_id": "del",
                "started": dt.datetime.now(),
                "status": "completed",
                "roots": ["/r"],
                "errors": [],
                "durations": {},
                "settings": {},
            },
            {},
        )
    finally:
        w.close()
    commit(store, [doc("paper", ["Quokka marmalade recipes."], "pdf")], run_id="edit")
    with open_index(store) as idx:
        for mode in ("bm25", "vector", "hybrid"):
            assert "note" not in titles(idx.search("E11000 FY2018 aside", k=100, mode=mode))
        assert titles(idx.search("levels of AGI", k=3, mode="bm25")) == []
        assert titles(idx.search("quokka marmalade", k=1)) == ["paper"]
        assert idx.status()["search_index"]["rows"] == 121


def test_search_process_imports_no_heavy_module(store):
    import subprocess
    import sys

    code = (
        "import sys, quarry; idx = quarry.open(sys.argv[1]); idx.search('alpha', k=3); "
        "idx.search('alpha', k=3, filters='file_type = pdf'); "
        "heavy = ('prefect', 'torch', 'lancedb', 'pyarrow.compute', 'pandas'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    env = {**os.environ, "QUARRY_EMBED_BACKEND": "hash", "QUARRY_EMBED_DIM": str(DIM)}
    done = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_document_evidence_ranks_the_named_documents_chunks_first(tmp_path):
    # Two filings with the same text: only their cards (file name, period) tell the years apart.
    text = f"Revenue grew in every segment and the margin held. {FILLER}"
    store = tmp_path / "s"
    filings = []
    for name, year in (("acme_10k_a", "2019"), ("acme_10k_b", "2018")):
        record = doc(name, [text], metadata={"company": "ACME Corp", "period": f"fiscal year {year}"})
        record.title = "acme annual report"  # titles are no part of a card
        for chunk in record.chunks:
            chunk.header = "Document: acme annual report"  # chunk headers and text stay alike
        filings.append(record)
    commit(store, [*filings, doc("other", [f"Unrelated notes about the cafeteria. {FILLER}"])])
    with open_index(store) as idx:
        for year in ("2018", "2019"):
            on = idx.search(f"acme {year} revenue", k=2)
            assert on.results[0].path.endswith("_a.md" if year == "2019" else "_b.md")
            assert on.weights["documents"] == 1.0
            assert on.results[0].score > on.results[1].score
            off = idx.search(f"acme {year} revenue", k=2, weights={"documents": 0})
            assert "documents" not in off.weights and off.results[0].score == off.results[1].score
        assert idx.snapshot.index.manifest["cards"]["documents"] == 3
        # rrf has no normalised scale for the evidence to join: it is not applied there
        assert "documents" not in idx.search("acme 2019 revenue", k=2, fusion="rrf").weights


def test_status_counts_the_vocabulary_only_for_an_unrestricted_caller_and_once(tmp_path, monkeypatch):
    """The whole-index vocabulary (a Python loop over every later segment's terms) is counted only
    when status returns it, once per loaded generation, and equals a one-segment build's."""
    from quarry.retrieval.bm25 import BM25Index
    from quarry.retrieval.segmented import SegmentedBM25

    extra = doc("late", ["Quokka marmalade zebrafish recipes, alpha."], "txt")
    two = make_store(tmp_path / "two")
    commit(two, [extra], run_id="late")
    one = tmp_path / "one"
    commit(
        one,
        [
            *(
                doc(
                    f"md{i:02d}",
                    [f"alpha alpha beta {FILLER}", f"gamma delta {i} {FILLER}"],
                    metadata={"team": "web"},
                    mtime=T0 + i * DAY,
                )
                for i in range(60)
            ),
            doc(
                "note",
                [f"An aside: alpha appears here once. {FILLER} Error E11000 in FY2018."],
                "txt",
                metadata={"team": "db"},
                folder="notes/sub",
                mtime=T0 + 100 * DAY,
            ),
            doc(
                "paper",
                ["Levels of AGI: performance and generality.", "Autonomy and risk, alpha."],
                "pdf",
                pages=[1, 2],
                mtime=T0 + 200 * DAY,
            ),
            extra,
        ],
    )
    calls, lookups = [], []
    counted = SegmentedBM25.vocabulary_size
    monkeypatch.setattr(SegmentedBM25, "vocabulary_size", lambda self: calls.append(1) or counted(self))
    text_of = BM25Index.term_text
    monkeypatch.setattr(BM25Index, "term_text", lambda self, column: lookups.append(1) or text_of(self, column))
    with open_index(two) as idx:
        restricted = idx.status(principals=["group:nobody"])
        assert "search_index" not in restricted and calls == []
        whole = idx.status()
        assert len(whole["search_index"]["segments"]) == 2 and calls == [1] and lookups
        seen = len(lookups)
        assert idx.status()["search_index"]["terms"] == whole["search_index"]["terms"]
        assert len(lookups) == seen  # kept for the generation, not counted again
    with open_index(one) as idx:
        single = idx.status()["search_index"]
    assert len(single["segments"]) == 1
    assert whole["search_index"]["terms"] == single["terms"]
