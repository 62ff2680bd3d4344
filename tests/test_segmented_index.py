"""The segmented search index and the layered catalog against a full rebuild.

BM25 over several segments with deleted rows must give the top rows and scores of a build over the
live rows alone, bit for bit; a store that reached its state through many small commits (layers,
merges, deletions, moves) must answer the judged SciFact queries with the same metrics, and random
queries with the same top k up to ties, as a store indexed once from that state.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import random

import numpy as np
import pyarrow as pa
import pytest
from conftest import shared

import quarry.search.query
from quarry.core.models import Chunk, DocumentRecord, FileInfo, Section, join_header
from quarry.core.settings import Settings
from quarry.eval.evaluation import chunk_ranking_to_docs, evaluate, load_beir
from quarry.ingest.embedders.hashing import HashEmbedder
from quarry.retrieval import searchindex
from quarry.retrieval.bm25 import query_tokens
from quarry.search.filters import Filter
from quarry.store import catalog, layers
from quarry.store.catalog import table_schema
from quarry.store.layout import read_pointer
from quarry.store.writer import StoreWriter

DIM = 32
EMB = HashEmbedder(DIM)
SETTINGS = Settings.from_env(embed_backend="hash", embed_dim=DIM)
T0 = dt.datetime(2024, 1, 1).timestamp()


# --- the index alone: segments built from catalogs, against one build of the live rows ----------


def _catalog(path, items: dict[str, str]):
    """A whole catalog of one-chunk documents (doc id -> text)."""
    con = catalog.create(path)
    now = dt.datetime(2024, 1, 1)
    chunks = [
        {
            "chunk_id": f"{k}:0",
            "doc_id": k,
            "section_index": 0,
            "chunk_index": 0,
            "start_char": 0,
            "end_char": len(t),
            "page_start": None,
            "page_end": None,
            "header": "",
            "text": t,
            "text_hash": k,
            "n_tokens": 1,
            "search_text": _tokens(t),
        }
        for k, t in sorted(items.items())
    ]
    docs = [
        {
            "doc_id": k,
            "path": f"/r/{k}.md",
            "root": "/r",
            "rel_path": f"{k}.md",
            "file_type": "md",
            "size": 1,
            "mtime": now,
            "sha256": k,
            "title": k,
            "summary": "",
            "n_pages": None,
            "n_sections": 1,
            "n_chunks": 1,
            "metadata": "{}",
            "indexed_at": now,
            "run_id": "r",
            "path_bytes": None,
        }
        for k in sorted(items)
    ]
    con.register("c", pa.Table.from_pylist(chunks, schema=table_schema("chunks")))
    con.register("d", pa.Table.from_pylist(docs, schema=table_schema("documents")))
    con.execute("INSERT INTO chunks BY NAME SELECT * FROM c")
    con.execute("INSERT INTO documents BY NAME SELECT * FROM d")
    return con


def _tokens(text: str) -> str:
    from quarry.retrieval.textnorm import bm25_text

    return bm25_text(text)


def _vectors(ids):
    """Deterministic vectors per chunk id (what a commit would read from LanceDB)."""
    import hashlib

    seeds = [int.from_bytes(hashlib.sha256(c.encode()).digest()[:4], "little") for c in ids.to_pylist()]
    out = (
        np.stack([np.random.default_rng(s).standard_normal(8).astype(np.float32) for s in seeds])
        if seeds
        else np.zeros((0, 8), np.float32)
    )
    return out


@pytest.fixture(scope="module")
def scifact_texts():
    path = shared("beir", "scifact")
    docs = [json.loads(line) for line in (path / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:1500]]
    queries = [json.loads(line)["text"] for line in (path / "queries.jsonl").read_text().splitlines()[:150]]
    return {f"{i:08d}": f"{d['title']}\n{d['text']}" for i, d in enumerate(docs)}, queries


@pytest.fixture(scope="module")
def three_segments(tmp_path_factory, scifact_texts):
    """Segments of three generations (changes, deletions and additions in each) and a build of
    the live rows alone."""
    texts, _ = scifact_texts
    tmp = tmp_path_factory.mktemp("segments")
    rng = random.Random(7)
    keys = sorted(texts)
    live = {k: texts[k] for k in keys[:1000]}
    gens = [dict(live)]
    earlier: list = []
    dead_rows, dead_docs = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for gen in (1, 2, 3):
        items = gens[-1] if gen == 1 else None
        if gen > 1:
            changed = rng.sample(sorted(live), 40)
            removed = rng.sample(sorted(set(live) - set(changed)), 25)
            added = keys[1000 + (gen - 2) * 250 : 1000 + (gen - 1) * 250]
            items = {k: live[k] + f" revised in generation {gen} with kestrel notes" for k in changed}
            items.update({k: texts[k] for k in added})
            offsets = np.cumsum([0] + [s.n_rows for s in earlier])
            doc_offsets = np.cumsum([0] + [s.n_docs for s in earlier])
            rows, docs = [dead_rows], [dead_docs]
            for seg, off, doff in zip(earlier, offsets, doc_offsets):
                mine = [k for k in changed + removed if seg.doc_rows_of([k]).size]
                alive = [k for k in mine if not np.isin(seg.doc_rows_of([k]) + doff, dead_docs).any()]
                rows.append(seg.chunk_rows_of(alive) + off)
                docs.append(seg.doc_rows_of(alive) + doff)
            dead_rows, dead_docs = np.unique(np.concatenate(rows)), np.unique(np.concatenate(docs))
            for k in removed:
                live.pop(k)
            live.update(items)
        folder = tmp / searchindex.folder_name(gen)
        con = _catalog(tmp / f"c{gen}.duckdb", items)
        searchindex.build_into(
            folder, con, _vectors, generation=gen, earlier=earlier, deleted_rows=dead_rows, deleted_docs=dead_docs
        )
        con.close()
        earlier.append(searchindex.IndexSegment.load(folder, gen))
    full_con = _catalog(tmp / "full.duckdb", live)
    arrays, manifest = searchindex.build(full_con, _vectors)
    full_con.close()
    return searchindex.SearchIndex.load(tmp / searchindex.folder_name(3)), searchindex.SearchIndex.from_arrays(
        arrays, manifest
    )


def test_bm25_over_segments_equals_a_rebuild_bit_for_bit(three_segments, scifact_texts):
    seg, full = three_segments
    _, queries = scifact_texts
    assert len(seg.segments) == 3 and len(seg.bm25.deleted) > 0 and not seg.bm25.exact
    assert seg.live_rows == full.live_rows and seg.bm25.avgdl == full.bm25.avgdl
    rng = np.random.default_rng(3)
    words = " ".join(queries).split()
    extra = [" ".join(rng.choice(words, size=int(rng.integers(1, 6)))) for _ in range(100)] + ["kestrel notes revised"]
    # words only later segments hold, and words no segment holds as written but whose stem one does
    # (looked up once per word and kept: the later queries reuse what the earlier ones found)
    extra += ["kestrels revising", "notes kestrel", "revising kestrels notes"]
    for q in queries + extra:
        toks = query_tokens(q)
        for n in (1, 10, 50):
            r1, s1 = seg.bm25.search_tokens(toks, n)
            r2, s2 = full.bm25.search_tokens(toks, n)
            assert np.array_equal(s1, s2), q  # the same float32 scores, in the same order
            assert _by_score(seg.chunk_ids(r1), s1) == _by_score(full.chunk_ids(r2), s2), q


def test_a_reader_shared_by_threads_past_its_caches_bounds(three_segments, scifact_texts):
    """A server's threads share one reader: its per-query caches fill past their bounds under
    them, and every thread still gets the answers one thread gets."""
    from concurrent.futures import ThreadPoolExecutor

    seg, _ = three_segments
    _, queries = scifact_texts
    words = sorted({w for q in queries for w in query_tokens(q)})
    rng = random.Random(11)
    asked = [[rng.choice(words) for _ in range(rng.randint(1, 4))] for _ in range(1500)]  # past the 512 kept
    alone = [seg.bm25.search_tokens(toks, 10) for toks in asked]
    with ThreadPoolExecutor(4) as pool:
        shared_answers = list(pool.map(lambda toks: seg.bm25.search_tokens(toks, 10), asked))
    for (r1, s1), (r2, s2) in zip(alone, shared_answers):
        assert np.array_equal(r1, r2) and np.array_equal(s1, s2)


def test_masks_and_document_cards_over_segments(three_segments, scifact_texts):
    """A filter applies before the top n; the cards' exact scores and maximum equal a rebuild's."""
    seg, full = three_segments
    _, queries = scifact_texts
    ids_seg = seg.chunk_ids(range(seg.n_rows))
    ids_full = full.chunk_ids(range(full.n_rows))
    keep = {c for c in ids_full if int(c[:8]) % 3 == 0}
    mask_seg = np.array([c in keep for c in ids_seg])
    mask_full = np.array([c in keep for c in ids_full])
    for q in queries[:60]:
        toks = query_tokens(q)
        r1, s1 = seg.bm25.search_tokens(toks, 20, mask_seg)
        r2, s2 = full.bm25.search_tokens(toks, 20, mask_full)
        assert np.array_equal(s1, s2) and _by_score(seg.chunk_ids(r1), s1) == _by_score(full.chunk_ids(r2), s2)
        rows = r1[:10].tolist()
        doc_of, scores = seg.cards.evidence(rows, toks)
        by_id = dict(zip(seg.chunk_ids(rows), (scores[doc_of[r]] if doc_of[r] >= 0 else None for r in rows)))
        full_rows = [ids_full.index(c) for c in seg.chunk_ids(rows)]
        doc_of2, scores2 = full.cards.evidence(full_rows, toks)
        assert max(scores) == max(scores2)
        assert by_id == dict(
            zip(full.chunk_ids(full_rows), (scores2[doc_of2[r]] if doc_of2[r] >= 0 else None for r in full_rows))
        )


def test_exact_vector_search_over_segments_equals_a_rebuild(three_segments):
    seg, full = three_segments
    rng = np.random.default_rng(5)
    for _ in range(30):
        q = rng.standard_normal(8).astype(np.float32)
        r1, s1 = seg.dense.search(q, 10, method="exact")
        r2, s2 = full.dense.search(q, 10, method="exact")
        assert np.array_equal(s1, s2) and _by_score(seg.chunk_ids(r1), s1) == _by_score(full.chunk_ids(r2), s2)
    every = seg.dense.search(q, seg.n_rows, method="exact")[0]  # deleted rows never come back
    assert len(every) == seg.live_rows and not set(every.tolist()) & set(seg.bm25.deleted.tolist())


def test_a_small_segment_is_probed_with_the_base_clusters(tmp_path):
    """A segment too small for its own IVF is laid out by the base's clusters at commit and probed
    with them: each of its rows is found in the nearest cluster alone, and exact search over both
    still equals one build over the same rows, bit for bit."""
    texts = {f"{i:08d}": f"document {i} about topic{i % 7} and theme{i % 11}" for i in range(630)}
    base_items = {k: texts[k] for k in sorted(texts)[:600]}
    delta_items = {k: texts[k] for k in sorted(texts)[600:]}
    con = _catalog(tmp_path / "c1.duckdb", base_items)
    searchindex.build_into(tmp_path / searchindex.folder_name(1), con, _vectors, ivf_rows=100, generation=1)
    con.close()
    base = searchindex.IndexSegment.load(tmp_path / searchindex.folder_name(1), 1)
    assert base.dense.has_ivf
    con = _catalog(tmp_path / "c2.duckdb", delta_items)
    manifest = searchindex.build_into(
        tmp_path / searchindex.folder_name(2), con, _vectors, ivf_rows=100, generation=2, earlier=[base]
    )
    con.close()
    folder = tmp_path / searchindex.folder_name(2)
    assert manifest["segment"]["dense"]["base_ivf"] == {"nlist": len(base.dense.centroids), "generation": 1}
    assert (folder / "dense.slot_rows.npy").exists() and not (folder / "ivf.centroids.npy").exists()
    index = searchindex.SearchIndex.load(folder)
    delta = index.segments[1].dense
    assert delta.centroids is index.segments[0].dense.centroids
    for part in index.dense.parts:
        part.min_probes = 1  # the nearest cluster alone
    ids = index.chunk_ids(range(index.n_rows))
    vectors = _vectors(pa.array([f"{k}:0" for k in sorted(delta_items)]))
    for local, v in enumerate(vectors):
        rows, _ = index.dense.search(v, 1, method="ivf")
        assert ids[int(rows[0])] == f"{sorted(delta_items)[local]}:0"
    con = _catalog(tmp_path / "full.duckdb", texts)
    arrays, full_manifest = searchindex.build(con, _vectors, ivf_rows=100)
    con.close()
    full = searchindex.SearchIndex.from_arrays(arrays, full_manifest)
    rng = np.random.default_rng(11)
    for _ in range(20):
        q = rng.standard_normal(8).astype(np.float32)
        r1, s1 = index.dense.search(q, 10, method="exact")
        r2, s2 = full.dense.search(q, 10, method="exact")
        assert np.array_equal(s1, s2) and _by_score(index.chunk_ids(r1), s1) == _by_score(full.chunk_ids(r2), s2)


def _by_score(ids, scores) -> list[tuple[float, frozenset]]:
    """Results as (score, ids of that score) groups: equal up to the order of ties."""
    groups: dict[float, set] = {}
    for i, s in zip(ids, scores.tolist()):
        groups.setdefault(s, set()).add(i)
    return [(s, frozenset(v)) for s, v in groups.items()]


# --- the merge policy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base, deleted, deltas, own, env, expected",
    [
        (1000, 0, [], 10, {}, []),  # the first delta stays
        (100_000, 0, [(2, 20)], 20, {}, [2]),  # small ones fold in (4,096-row floor)
        (100_000, 0, [(2, 5000), (3, 20)], 20, {}, [3]),  # a big one stays under a small merge
        (100_000, 0, [(2, 5000), (3, 5000)], 5000, {}, [2, 3]),  # equal sizes: a binary counter's carry
        (1000, 0, [(2, 200)], 100, {}, None),  # past a quarter of the base: a new base
        (1000, 300, [], 1, {}, None),  # deletions from the base count too
        (0, 0, [], 5, {}, None),  # an empty base
        (
            10**6,
            0,
            [(g, 10**5 // 2**g) for g in range(2, 8)],
            1,
            {"QUARRY_MAX_LAYERS": "4", "QUARRY_MERGE_MIN_ROWS": "1"},
            [4, 5, 6, 7],
        ),
    ],
)
def test_plan_merge(monkeypatch, base, deleted, deltas, own, env, expected):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert layers.plan_merge(base, deleted, deltas, own) == expected


# --- whole stores: many small commits against one commit of the same state ----------------------


def _record(doc_id: str, rel: str, title: str, text: str, mtime: float = T0) -> DocumentRecord:
    """A document cut in chunks of about 600 characters at sentence ends."""
    import hashlib

    parts, current = [], ""
    for sentence in text.replace("\n", " ").split(". "):
        if current and len(current) + len(sentence) > 600:
            parts.append(current)
            current = ""
        current += sentence + ". "
    parts.append(current)
    file = FileInfo(
        path=f"/corpus/{rel}",
        root="/corpus",
        rel_path=rel,
        file_type="md",
        size=len(text),
        mtime=mtime,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
    )
    chunks, pos = [], 0
    for i, part in enumerate(parts):
        header = f"Document: {title}"
        chunks.append(
            Chunk(
                f"{doc_id}:{i}",
                doc_id,
                0,
                i,
                pos,
                pos + len(part),
                None,
                None,
                header,
                part,
                hashlib.sha256(join_header(header, part).encode()).hexdigest(),
                len(part) // 4,
            )
        )
        pos += len(part)
    return DocumentRecord(doc_id, file, title, "", [Section(0, title, 1, 0, pos)], chunks)


def _commit(store, records=(), deletes=(), moves=(), run_id="r"):
    w = StoreWriter(store, EMB.model, DIM).open()
    try:
        chunks = [c for r in records for c in r.chunks]
        vecs = dict(zip([c.text_hash for c in chunks], EMB.embed([c.embed_text for c in chunks]))) if chunks else {}
        w.write_documents(list(records), vecs, run_id)
        w.delete_documents(list(deletes))
        w.move_documents([(d, f"/corpus/{rel}", "/corpus", rel, dt.datetime(2024, 2, 1), run_id) for d, rel in moves])
        w.commit(
            {
                "run_id": run_id,
                "started": dt.datetime.now(),
                "status": "completed",
                "roots": ["/corpus"],
                "errors": [],
                "durations": {},
                "settings": {},
            },
            {},
        )
    finally:
        w.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """SciFact through 9 small commits (edits, deletions, moves, additions) without a merge into a
    new base — the fifth commit big enough to fold the four before it into its layer, the later ones
    smaller, so layers stay — and the same final state indexed in one commit."""
    beir = load_beir(str(shared("beir", "scifact")))
    ids = list(beir.corpus)[:1200]
    final = {d: _record(f"{i:012x}", f"{i // 100:02d}/{d}.md", *beir.corpus[d]) for i, d in enumerate(ids)}
    rng = random.Random(11)
    tmp = tmp_path_factory.mktemp("stores")
    layered = tmp / "layered"
    os.environ.update({"QUARRY_REBASE_SHARE": "100", "QUARRY_MERGE_MIN_ROWS": "1"})
    try:
        _commit(layered, [final[d] for d in ids[:700]], run_id="r0")
        alive = list(ids[:700])
        sizes = [40, 35, 30, 25, 150, 30, 20, 10]
        for step in range(1, 9):
            start = 700 + sum(sizes[: step - 1])
            added = ids[start : start + sizes[step - 1]]
            edited = rng.sample(alive, 12)
            for d in edited:  # an edit, then (for some) the final text again in a later commit
                title, text = beir.corpus[d]
                final[d] = dataclasses.replace(
                    _record(
                        final[d].doc_id,
                        final[d].file.rel_path,
                        title,
                        text + f" Erratum {step}: kestrel dosage revised.",
                    )
                )
            deleted = rng.sample([d for d in alive if d not in edited], 6)
            moved = rng.sample([d for d in alive if d not in edited and d not in deleted], 5)
            moves = []
            for d in moved:
                rel = f"moved/{step}/{d}.md"
                old = final[d]
                final[d] = dataclasses.replace(
                    old, file=dataclasses.replace(old.file, path=f"/corpus/{rel}", rel_path=rel)
                )
                moves.append((old.doc_id, rel))
            _commit(
                layered,
                [final[d] for d in edited + list(added)],
                [final[d].doc_id for d in deleted],
                moves,
                run_id=f"r{step}",
            )
            alive = [d for d in alive if d not in deleted] + list(added)
            for d in deleted:
                final.pop(d)
    finally:
        for key in ("QUARRY_REBASE_SHARE", "QUARRY_MERGE_MIN_ROWS"):
            os.environ.pop(key, None)
    whole = tmp / "whole"
    _commit(whole, [final[d] for d in alive], run_id="w")
    return beir, layered, whole, {r.doc_id: d for d, r in final.items()}


def test_small_commits_answer_the_judged_queries_as_one_commit(stores):
    beir, layered, whole, beir_id = stores
    pointer = read_pointer(layered)
    assert pointer.layers == (1, 6, 7, 8, 9), pointer.layers  # layers 2-5 merged into 6 (the big commit)
    qids = sorted(beir.queries)
    metrics = {}
    for name, store in (("layered", layered), ("whole", whole)):
        with quarry.search.query.open(store, SETTINGS) as idx:
            idx.prime_queries([beir.queries[q] for q in qids])
            metrics[name] = {}
            for mode in ("bm25", "vector", "hybrid"):
                rankings = {
                    q: chunk_ranking_to_docs(
                        [beir_id.get(r.doc_id, r.doc_id) for r in idx.search(beir.queries[q], k=100, mode=mode).results]
                    )
                    for q in qids
                }
                metrics[name][mode] = evaluate(rankings, {q: beir.qrels[q] for q in qids})
    assert metrics["layered"] == metrics["whole"]
    assert metrics["whole"]["hybrid"]["ndcg@10"] > 0.1  # the subset holds many judged documents


def test_small_commits_give_the_top_k_of_one_commit_up_to_ties(stores):
    beir, layered, whole, _ = stores
    rng = random.Random(5)
    words = " ".join(beir.queries.values()).split()
    queries = [" ".join(rng.sample(words, rng.randint(1, 5))) for _ in range(120)] + ["kestrel dosage erratum"]
    wheres = [None, Filter.build(where=["path LIKE '%/moved/%'"]), Filter.build(where=["path LIKE '%/03/%'"])]
    with quarry.search.query.open(layered, SETTINGS) as a, quarry.search.query.open(whole, SETTINGS) as b:
        assert a.status()["chunks"] == b.status()["chunks"] and a.status()["documents"] == b.status()["documents"]
        for q in queries:
            for mode in ("bm25", "vector", "hybrid"):
                for where in wheres:
                    ra = a.search(q, k=10, mode=mode, filters=where).results
                    rb = b.search(q, k=10, mode=mode, filters=where).results
                    assert [round(r.score, 6) for r in ra] == [round(r.score, 6) for r in rb], (q, mode, where)
                    assert _ties(ra) == _ties(rb), (q, mode, where)
                    paths = {r.chunk_id: (r.path, r.title, r.text) for r in rb}
                    assert all(paths[r.chunk_id] == (r.path, r.title, r.text) for r in ra if r.chunk_id in paths)


def test_commits_count_the_terms_of_the_rows_they_delete(stores):
    """Each commit counts the BM25 columns of the rows it deletes (deleted.terms.npy), so readers
    look a term's live document frequency up: the counts equal those of the deleted rows in each
    column, for every column of every segment, after edits, deletions, moves and merges."""
    _, layered, _, _ = stores
    pointer = read_pointer(layered)
    index = searchindex.SearchIndex.load(layered / searchindex.folder_name(pointer.generation))
    bm25 = index.bm25
    assert len(bm25.deleted) and (layered / searchindex.folder_name(pointer.generation) / "deleted.terms.npy").exists()
    checked = 0
    for s, part in enumerate(bm25.parts):
        dead = bm25.seg_deleted[s]
        if not len(dead):
            continue
        assert bm25.dead_terms[s] is not None, f"segment {s} was not counted"
        mask = np.zeros(part.n_rows, dtype=bool)
        mask[dead] = True
        df = np.diff(part.indptr)
        in_column = np.add.reduceat(mask[part.rows].astype(np.int64), part.indptr[:-1]) * (df > 0)
        counted = np.zeros(len(df), dtype=np.int64)
        columns, rows = bm25.dead_terms[s]
        counted[columns] = rows
        assert np.array_equal(counted, in_column)
        assert all(bm25._live_df(s, int(c)) == int(df[c] - in_column[c]) for c in range(0, len(df), 37))
        checked += 1
    assert checked >= 2  # the base and a delta both lost rows


def test_a_deletion_past_the_counting_bound_is_left_to_the_readers(tmp_path, monkeypatch):
    """A commit deleting more rows of a segment than it counts leaves that segment uncounted; its
    readers count the deleted rows in the columns and search as a rebuild does."""
    from quarry.retrieval import deltasegment

    beir = load_beir(str(shared("beir", "scifact")))
    ids = list(beir.corpus)[:120]
    records = {d: _record(f"{i:012x}", f"{d}.md", *beir.corpus[d]) for i, d in enumerate(ids)}
    store, whole = tmp_path / "layered", tmp_path / "whole"
    monkeypatch.setenv("QUARRY_REBASE_SHARE", "100")
    monkeypatch.setattr(deltasegment, "COUNT_DELETED_MAX", 3)
    _commit(store, list(records.values()), run_id="r0")
    gone = ids[:10]
    _commit(store, deletes=[records[d].doc_id for d in gone], run_id="r1")
    _commit(whole, [records[d] for d in ids[10:]], run_id="w")
    pointer = read_pointer(store)
    manifest = json.loads((store / searchindex.folder_name(pointer.generation) / "index.json").read_text())
    assert manifest["deleted"]["rows"] > 3 and not manifest["deleted"].get("terms")
    with quarry.search.query.open(store, SETTINGS) as a, quarry.search.query.open(whole, SETTINGS) as b:
        assert a.snapshot.index.bm25.dead_terms == [None, None]
        for q in list(beir.queries.values())[:40]:
            ra, rb = a.search(q, k=10, mode="bm25").results, b.search(q, k=10, mode="bm25").results
            assert [round(r.score, 6) for r in ra] == [round(r.score, 6) for r in rb], q


def test_an_index_without_counts_is_counted_at_its_next_commit(tmp_path, monkeypatch):
    """A generation written before the counts existed (deleted rows, no deleted.terms.npy): the next
    commit counts every deleted row of the segment, earlier ones included."""
    beir = load_beir(str(shared("beir", "scifact")))
    ids = list(beir.corpus)[:120]
    records = {d: _record(f"{i:012x}", f"{d}.md", *beir.corpus[d]) for i, d in enumerate(ids)}
    store = tmp_path / "store"
    monkeypatch.setenv("QUARRY_REBASE_SHARE", "100")
    _commit(store, list(records.values()), run_id="r0")
    _commit(store, deletes=[records[d].doc_id for d in ids[:5]], run_id="r1")
    folder = store / searchindex.folder_name(read_pointer(store).generation)
    manifest = json.loads((folder / "index.json").read_text())
    assert manifest["deleted"].pop("terms") and (folder / "deleted.terms.npy").exists()
    (folder / "deleted.terms.npy").unlink()  # as an older quarry wrote it
    (folder / "index.json").write_text(json.dumps(manifest))
    _commit(store, deletes=[records[d].doc_id for d in ids[5:8]], run_id="r2")
    index = searchindex.SearchIndex.load(store / searchindex.folder_name(read_pointer(store).generation))
    bm25 = index.bm25
    part, dead = bm25.parts[0], bm25.seg_deleted[0]
    assert len(dead) and bm25.dead_terms[0] is not None
    mask = np.zeros(part.n_rows, dtype=bool)
    mask[dead] = True
    expected = np.add.reduceat(mask[part.rows].astype(np.int64), part.indptr[:-1])
    counted = np.zeros(len(expected), dtype=np.int64)
    counted[bm25.dead_terms[0][0]] = bm25.dead_terms[0][1]
    assert np.array_equal(counted, expected)


def _ties(results) -> list:
    """Chunk ids grouped by score, the group at the cut left out (ties there may differ)."""
    groups: dict[float, set] = {}
    for r in results:
        groups.setdefault(round(r.score, 6), set()).add((r.chunk_id, r.path, r.text))
    keys = list(groups)
    return [(k, frozenset(groups[k])) for k in keys[:-1]]


def test_a_plain_duckdb_client_reads_a_layered_catalog_with_the_attach_recipe(stores):
    import duckdb

    _, layered, whole, _ = stores
    with quarry.search.query.open(layered, SETTINGS) as idx:
        status = idx.status()
    assert status["catalog_attach"]  # a delta over earlier layers
    con = duckdb.connect(status["catalog"], read_only=True)
    for statement in status["catalog_attach"]:
        con.execute(statement)
    counts = con.execute(
        "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM sections), "
        "(SELECT count(*) FROM chunks), (SELECT count(*) FROM runs)"
    ).fetchone()
    con.close()
    plain = duckdb.connect(str(whole / read_pointer(whole).catalog), read_only=True)
    want = plain.execute(
        "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM sections), (SELECT count(*) FROM chunks)"
    ).fetchone()
    plain.close()
    assert counts[:3] == want and counts[3] == 9  # every run of the layered store's history


def test_doctor_sql_and_export_read_a_layered_store(stores, tmp_path):
    from quarry.store.doctor import diagnose

    _, layered, whole, _ = stores
    report = diagnose(layered)
    assert report.healthy, report.to_dict()
    detail = {f.check: f.detail for f in report.findings}
    assert "a layer over catalog-000001.duckdb" in detail["catalog"] and "in 5 segments" in detail["index"]
    counts = {}
    for name, store in (("layered", layered), ("whole", whole)):
        with quarry.search.query.open(store, SETTINGS) as idx:
            rows = idx.sql("SELECT count(*), count(DISTINCT path) FROM chunks_full").rows[0]
            exported = idx.export(tmp_path / name, "jsonl")
            counts[name] = (rows, exported.rows)
    assert counts["layered"] == counts["whole"]
