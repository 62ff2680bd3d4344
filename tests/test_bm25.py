"""quarry's BM25 index: scores against DuckDB's match_bm25 on real text, the stemmer against
DuckDB's, numbers and codes on the real handbook, and the mechanics (vocabulary, masks)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pyarrow as pa
import pytest
from conftest import shared

from quarry.core.sqlfiles import load_sql
from quarry.retrieval import bm25
from quarry.retrieval.bm25 import BM25Index, Vocabulary, query_tokens, stem_words
from quarry.retrieval.searchindex import use_source
from quarry.retrieval.textnorm import bm25_text, tokens
from quarry.store import catalog
from quarry.store.catalog import table_schema


def catalog_with(tmp_path, texts: list[str]):
    """A real catalog holding one chunk per text (chunk ids sort in list order)."""
    con = catalog.create(tmp_path / "c.duckdb")
    rows = [
        {
            "chunk_id": f"{i:08d}:0",
            "doc_id": f"{i:08d}",
            "section_index": 0,
            "chunk_index": 0,
            "start_char": 0,
            "end_char": len(t),
            "page_start": None,
            "page_end": None,
            "header": "",
            "text": t,
            "text_hash": str(i),
            "n_tokens": 1,
            "search_text": bm25_text(t),
        }
        for i, t in enumerate(texts)
    ]
    con.register("new_chunks", pa.Table.from_pylist(rows, schema=table_schema("chunks")))
    con.execute("INSERT INTO chunks BY NAME SELECT * FROM new_chunks")
    con.unregister("new_chunks")
    use_source(con, "main")
    return con


def index_of(con, n):
    arrays, info = bm25.build(con, n)
    return BM25Index(arrays, n), info


def search(index, query, n=10, mask=None):
    return index.search(index.columns(query_tokens(query)), n, mask)


@pytest.fixture(scope="module")
def scifact():
    path = shared("beir", "scifact")
    docs = [json.loads(line) for line in (path / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:600]]
    queries = [json.loads(line)["text"] for line in (path / "queries.jsonl").read_text().splitlines()[:40]]
    return [f"{d['title']}\n{d['text']}" for d in docs], queries


def test_scores_match_duckdb_match_bm25_on_real_text(tmp_path, scifact):
    texts, queries = scifact
    con = catalog_with(tmp_path, texts)
    index, info = index_of(con, len(texts))
    assert info["terms"] > 5000 and info["postings"] > 40000
    catalog.rebuild_fts(con)  # DuckDB's own BM25: porter stemmer, english stop words, k1 1.2, b 0.75
    compared = 0
    for q in queries:
        toks = query_tokens(q)
        ref = dict(con.execute(load_sql("bm25_search"), [" ".join(toks), len(texts)]).fetchall())
        rows, scores = search(index, q, n=len(texts))
        mine = {f"{r:08d}:0": float(s) for r, s in zip(rows.tolist(), scores.tolist())}
        assert set(mine) == set(ref), q
        for cid, score in ref.items():  # DuckDB's log() is base 10: the same scores over ln(10)
            assert mine[cid] == pytest.approx(score * math.log(10), rel=1e-5), (q, cid)
        compared += len(ref)
    assert compared > 1000


def test_formula_by_hand(tmp_path):
    texts = ["apple banana apple", "banana cherry", "cherry cherry cherry durian"]
    con = catalog_with(tmp_path, texts)
    index, info = index_of(con, 3)
    lengths = [3, 2, 4]
    avgdl = sum(lengths) / 3
    assert info["avgdl"] == pytest.approx(avgdl, abs=1e-3)

    def w(tf, df, length):
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avgdl))

    rows, scores = search(index, "banana cherry")
    got = dict(zip(rows.tolist(), scores.tolist()))
    assert got[0] == pytest.approx(w(1, 2, 3), rel=1e-6)
    assert got[1] == pytest.approx(w(1, 2, 2) + w(1, 2, 2), rel=1e-6)
    assert got[2] == pytest.approx(w(3, 2, 4), rel=1e-6)
    assert rows.tolist() == sorted(got, key=lambda r: -got[r])
    # repeated query words count once, as in match_bm25
    assert search(index, "cherry cherry banana")[1].tolist() == search(index, "banana cherry")[1].tolist()


def test_porter_stemmer_equals_duckdbs_on_real_words(scifact):
    import duckdb

    texts, _ = scifact
    words = sorted(
        {t for text in texts for t in tokens(text)}
        | {"running", "caresses", "ponies", "relational", "hopping", "agreed", "feed", "y", "s", "yyy"}
    )
    con = duckdb.connect()
    con.execute(f"LOAD '{catalog.fts_extension_path()}'")
    ref = con.execute("SELECT list_transform($1::VARCHAR[], t -> stem(t, 'porter'))", [words]).fetchone()[0]
    wrong = [(w, r, s) for w, r, s in zip(words, ref, stem_words(words)) if s != r]
    assert len(words) > 10000 and wrong == []


def test_a_query_word_missing_from_the_corpus_meets_its_stem(tmp_path):
    con = catalog_with(tmp_path, ["the runners were running", "gardens in spring"])
    index, _ = index_of(con, 2)
    assert index.lookup(["run"]) == ([], ["run"])  # not a corpus token ...
    assert search(index, "run")[0].tolist() == [0]  # ... but it shares the stem of running


@pytest.fixture(scope="module")
def handbook(tmp_path_factory):
    """Real handbook pages holding codes (FY24, Q2, v1.1.5, ISO27001, SHA256), plus neighbours."""
    from quarry.core.settings import Settings
    from quarry.ingest.discover import discover
    from quarry.ingest.plan import new_doc_id
    from quarry.ingest.process import process_files

    root = shared("trees", "sourcegraph-handbook")
    files, _ = discover([root])
    pattern = re.compile(r"FY24|\bQ2\b|v1\.1\.5|ISO27001|SHA256")
    chosen = [f for f in files if pattern.search(open(f.path, encoding="utf-8", errors="replace").read())]
    chosen += [f for f in files if f not in chosen][:40]
    records, errors, _ = process_files([(f, new_doc_id(f)) for f in chosen], Settings.from_env(embed_backend="hash"))
    assert not errors
    con = catalog.create(tmp_path_factory.mktemp("hb") / "c.duckdb")
    catalog.replace_documents(con, records, "run")
    use_source(con, "main")
    texts = [r[0] for r in con.execute("SELECT header || '\n' || text FROM chunks ORDER BY chunk_id").fetchall()]
    index, _ = index_of(con, len(texts))
    yield index, texts
    con.close()


@pytest.mark.parametrize(
    "query, expect",
    [
        ("FY24", r"FY ?24"),
        ("fy 24", r"FY ?24"),
        ("fy24 compensation", r"FY ?24"),
        ("v1.1.5", r"v1\.1\.5"),
        ("1.1.5", r"v1\.1\.5"),
        ("Q2", r"\bQ2\b"),
        ("ISO27001", r"ISO ?27001"),
        ("27001", r"27001"),
        ("SHA256", r"SHA-?256"),
    ],
)
def test_numbers_and_codes_on_real_text(handbook, query, expect):
    index, texts = handbook
    rows, _ = search(index, query, n=3)
    assert len(rows) and re.search(expect, texts[rows[0]], re.I), (query, texts[rows[0]][:200])


def test_mask_applies_before_the_top_n(tmp_path):
    texts = ["alpha alpha alpha"] * 5 + ["alpha beta"] * 5
    con = catalog_with(tmp_path, texts)
    index, _ = index_of(con, 10)
    assert search(index, "alpha", n=3)[0].tolist() == [0, 1, 2]  # ties broken by row
    mask = np.zeros(10, dtype=bool)
    mask[[7, 9]] = True
    rows, scores = search(index, "alpha", n=3, mask=mask)
    assert rows.tolist() == [7, 9] and scores[0] == scores[1] > 0


def test_vocabulary_binary_search():
    words = sorted(["", "a", "ab", "abc", "b", "naïve", "zz"][1:])
    blob, offsets = bm25._pack(words)
    vocab = Vocabulary(np.frombuffer(blob, dtype=np.uint8), offsets)
    assert [vocab.find(w) for w in words] == list(range(len(words)))
    assert vocab.find("aa") is None and vocab.find("zzz") is None and vocab.find("") is None
    with pytest.raises(ValueError, match="sorted"):
        bm25._pack(["b", "a"])


def test_empty_catalog_builds_an_empty_index(tmp_path):
    con = catalog_with(tmp_path, [])
    index, info = index_of(con, 0)
    assert info["terms"] == 0 and search(index, "anything")[0].tolist() == []


def reference_build(con, n_rows):
    """The BM25 build before it streamed slices (every token occurrence of the corpus in memory
    at once), kept as the reference the sliced build must equal byte for byte."""
    import pyarrow.compute as pc

    texts = con.execute(load_sql("bm25_texts")).fetch_arrow_table().column(0).combine_chunks()
    lists = pc.split_pattern(pc.fill_null(texts, ""), " ")
    flat = pc.list_flatten(lists)
    occurrence_rows = pc.list_parent_indices(lists).to_numpy()
    distinct = pc.unique(flat)
    surface = distinct.to_pylist()
    kept = [i for i, tok in enumerate(surface) if tok and tok not in bm25.STOPWORDS]
    stems = stem_words([surface[i] for i in kept])
    terms, kept_term = np.unique(np.array(stems, dtype=object), return_inverse=True) if stems else ([], [])
    term_of = np.full(len(surface), -1, dtype=np.int64)
    term_of[kept] = kept_term
    occurrence_terms = term_of[pc.index_in(flat, value_set=distinct).to_numpy()]
    counted = occurrence_terms >= 0
    keys = occurrence_terms[counted] * max(n_rows, 1) + occurrence_rows[counted]
    keys, tf = np.unique(keys, return_counts=True)
    term_ids, rows = keys // max(n_rows, 1), (keys % max(n_rows, 1)).astype(np.int32)
    weights, _ = bm25.bm25_weights(term_ids, rows, tf.astype(np.float64), len(terms), n_rows)
    indptr = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(np.bincount(term_ids, minlength=len(terms)), out=indptr[1:])
    order = sorted(kept, key=lambda i: surface[i])
    term_blob, term_offsets = bm25._pack([str(t) for t in terms])
    surface_blob, surface_offsets = bm25._pack([surface[i] for i in order])
    return {
        "bm25.terms.bin": term_blob,
        "bm25.term_offsets.npy": term_offsets,
        "bm25.surface.bin": surface_blob,
        "bm25.surface_offsets.npy": surface_offsets,
        "bm25.surface_terms.npy": term_of[order].astype(np.int32),
        "bm25.indptr.npy": indptr,
        "bm25.rows.npy": rows,
        "bm25.weights.npy": weights,
        "bm25.tf.npy": tf.astype(np.min_scalar_type(int(tf.max()) if len(tf) else 0)),
        "bm25.length.npy": np.bincount(rows, weights=tf, minlength=n_rows).astype(np.uint32),
    }


def assert_same_files(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        if isinstance(value, bytes):
            assert got[name] == value, name
        else:  # what np.save writes: dtype, shape and bytes
            assert (got[name].dtype, got[name].shape) == (value.dtype, value.shape), name
            assert got[name].tobytes() == value.tobytes(), name


@pytest.mark.parametrize("slice_rows", [1, 3, 7, 64, 100_000])
def test_sliced_build_equals_the_whole_corpus_build_on_real_text(tmp_path, scifact, slice_rows):
    texts, queries = scifact
    con = catalog_with(tmp_path, texts)
    arrays, info = bm25.build(con, len(texts), slice_rows=slice_rows)
    assert_same_files(arrays, reference_build(con, len(texts)))
    assert info["postings"] > 40000
    whole = BM25Index(bm25.build(con, len(texts), slice_rows=len(texts))[0], len(texts))
    sliced = BM25Index(arrays, len(texts))
    for q in queries:
        cols = whole.columns(query_tokens(q))
        assert sliced.columns(query_tokens(q)) == cols
        assert np.array_equal(sliced.scores(cols), whole.scores(cols)), q


def test_sliced_build_on_empty_and_stop_word_texts(tmp_path):
    texts = ["the of and", "apple  banana", "", "banana apples apple", "", "the", "cherry banana apple"]
    con = catalog_with(tmp_path, texts)
    con.execute("UPDATE chunks SET search_text = 'apple  banana   ' WHERE chunk_id = '00000001:0'")
    want = reference_build(con, len(texts))
    for slice_rows in (1, 2, 3, len(texts)):
        arrays, info = bm25.build(con, len(texts), slice_rows=slice_rows)
        assert_same_files(arrays, want)
        assert info["terms"] == 3 and info["tokens"] == 4  # appl, banana, cherri; apples is its own token


def test_a_catalog_with_more_chunks_than_rows_is_refused(tmp_path):
    con = catalog_with(tmp_path, ["apple", "banana", "cherry"])
    with pytest.raises(ValueError, match="more texts"):
        bm25.build(con, 2, slice_rows=2)
