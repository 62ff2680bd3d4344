import json
import math
from pathlib import Path

import pytest

from quarry.core.errors import UsageError
from quarry.eval.evaluation import (
    BeirSet,
    chunk_ranking_to_docs,
    evaluate,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
    write_corpus_tree,
)

SCIFACT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "beir" / "scifact"

LOG2_3 = math.log2(3)  # 1.5849625...
RELS = {"d1": 2, "d2": 1}


# --- ndcg ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ranking, rels, k, expected",
    [
        # DCG = 0/log2(2) + 2/log2(3) + 1/log2(4) = 0 + 1.26186 + 0.5 = 1.76186
        # IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.63093 = 2.63093 -> 1.76186 / 2.63093
        (["d3", "d1", "d2"], RELS, 10, (2 / LOG2_3 + 1 / 2) / (2 + 1 / LOG2_3)),
        # cut at 2: DCG = 0 + 2/log2(3) = 1.26186; IDCG@2 = 2.63093
        (["d3", "d1", "d2"], RELS, 2, (2 / LOG2_3) / (2 + 1 / LOG2_3)),
        # cut at 1: only d3 (gain 0) is seen
        (["d3", "d1", "d2"], RELS, 1, 0.0),
        # graded: the less relevant first. DCG = 1/1 + 2/log2(3) = 2.26186
        (["d2", "d1"], RELS, 10, (1 + 2 / LOG2_3) / (2 + 1 / LOG2_3)),
        (["d1", "d2"], RELS, 10, 1.0),
        (["d1", "d2", "d9"], RELS, 10, 1.0),
        # the ideal comes from all judged docs, not the retrieved ones:
        # DCG = 1; IDCG = 1 + 1/log2(3) + 1/log2(4) = 2.13093
        (["d1"], {"d1": 1, "d2": 1, "d3": 1}, 10, 1 / (1 + 1 / LOG2_3 + 1 / 2)),
        # a negative judgment adds no (negative) gain and stays out of the ideal:
        # DCG = 0 + 1/log2(3) = 0.63093; IDCG = 1/1
        (["d3", "d1"], {"d1": 1, "d2": 0, "d3": -1}, 10, 1 / LOG2_3),
        # duplicates removed keeping the first: same as ["d3", "d1", "d2"]
        (["d3", "d3", "d1", "d3", "d2"], RELS, 10, (2 / LOG2_3 + 1 / 2) / (2 + 1 / LOG2_3)),
        ([], RELS, 10, 0.0),
        (["d1"], {"d1": 0}, 10, 0.0),
        (["d1"], {}, 10, 0.0),
    ],
)
def test_ndcg_at_k(ranking, rels, k, expected):
    assert ndcg_at_k(ranking, rels, k) == pytest.approx(expected, abs=1e-12)


def test_ndcg_hand_value():
    # The first case above, as a number: 1.761860 / 2.630930 = 0.669672
    assert ndcg_at_k(["d3", "d1", "d2"], RELS, 10) == pytest.approx(0.669672, abs=1e-6)


# --- recall --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ranking, rels, k, expected",
    [
        (["d3", "d1", "d2"], {"d1": 2, "d2": 1, "d4": 1}, 1, 0.0),
        (["d3", "d1", "d2"], {"d1": 2, "d2": 1, "d4": 1}, 2, 1 / 3),
        (["d3", "d1", "d2"], {"d1": 2, "d2": 1, "d4": 1}, 3, 2 / 3),
        # graded relevance does not weigh recall; rel 0 is not relevant
        (["d1", "d2"], {"d1": 3, "d2": 1, "d3": 0}, 10, 1.0),
        # duplicates: top 2 after removing them is just [d1] -> 1 of 2, not 2 of 2
        (["d1", "d1", "d1"], {"d1": 1, "d2": 1}, 2, 0.5),
        ([], {"d1": 1}, 10, 0.0),
        (["d1"], {"d1": 0, "d2": -1}, 10, 0.0),
    ],
)
def test_recall_at_k(ranking, rels, k, expected):
    assert recall_at_k(ranking, rels, k) == pytest.approx(expected, abs=1e-12)


# --- mrr -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ranking, rels, k, expected",
    [
        (["d3", "d1", "d2"], RELS, 10, 1 / 2),
        (["d3", "d1", "d2"], RELS, 1, 0.0),
        (["d2", "d1"], RELS, 10, 1.0),  # any relevance > 0 counts, however graded
        (["d3", "d4", "d5", "d1"], RELS, 10, 1 / 4),
        (["d3", "d4", "d5", "d1"], RELS, 3, 0.0),
        # duplicates: [d3, d1] after removing them, so d1 is at rank 2 within k=2
        (["d3", "d3", "d1"], RELS, 2, 1 / 2),
        (["d9"], {"d9": 0}, 10, 0.0),
        ([], RELS, 10, 0.0),
    ],
)
def test_mrr_at_k(ranking, rels, k, expected):
    assert mrr_at_k(ranking, rels, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("metric", [ndcg_at_k, recall_at_k, mrr_at_k])
@pytest.mark.parametrize("k", [0, -1])
def test_metrics_reject_k_below_one(metric, k):
    with pytest.raises(ValueError, match="k must be at least 1"):
        metric(["d1"], {"d1": 1}, k)


# --- evaluate ------------------------------------------------------------------------------


def test_evaluate_two_queries():
    # q1: ndcg@10 = 0.669672 (as above), recall@10 = recall@100 = 1, mrr@10 = 1/2
    # q2: d5 at rank 1, d6 at rank 11.
    #     ndcg@10 = 1 / (1 + 1/log2(3)) = 0.613147, recall@10 = 1/2, recall@100 = 1, mrr = 1
    fillers = [f"x{i}" for i in range(9)]
    rankings = {"q1": ["d3", "d1", "d2"], "q2": ["d5", *fillers, "d6"]}
    qrels = {"q1": RELS, "q2": {"d5": 1, "d6": 1}}
    q1_ndcg = (2 / LOG2_3 + 1 / 2) / (2 + 1 / LOG2_3)
    q2_ndcg = 1 / (1 + 1 / LOG2_3)
    assert evaluate(rankings, qrels) == pytest.approx(
        {
            "ndcg@10": (q1_ndcg + q2_ndcg) / 2,  # (0.669672 + 0.613147) / 2 = 0.641410
            "recall@10": (1 + 1 / 2) / 2,
            "recall@100": (1 + 1) / 2,
            "mrr@10": (1 / 2 + 1) / 2,
        },
        abs=1e-12,
    )


def test_evaluate_missing_ranking_counts_zero_and_unjudged_query_is_skipped():
    # q1 perfect (1.0 everywhere), q2 never ran (0 everywhere), q3 has no relevant doc
    # (left out), "other" is not judged (ignored) -> every metric is (1 + 0) / 2.
    rankings = {"q1": ["d1"], "q3": ["d1"], "other": ["d7"]}
    qrels = {"q1": {"d1": 1}, "q2": {"d9": 2}, "q3": {"d1": 0}}
    assert evaluate(rankings, qrels) == {
        "ndcg@10": 0.5,
        "recall@10": 0.5,
        "recall@100": 0.5,
        "mrr@10": 0.5,
    }


@pytest.mark.parametrize("qrels", [{}, {"q1": {"d1": 0}}, {"q1": {}}])
def test_evaluate_needs_a_relevant_doc(qrels):
    with pytest.raises(UsageError, match="no query in the judgments has a relevant document"):
        evaluate({"q1": ["d1"]}, qrels)


@pytest.mark.parametrize(
    "chunks, docs",
    [
        (["a", "b", "a", "c"], ["a", "b", "c"]),
        (["b", "b", "a", "a", "b"], ["b", "a"]),
        (["a"], ["a"]),
        ([], []),
    ],
)
def test_chunk_ranking_to_docs(chunks, docs):
    assert chunk_ranking_to_docs(chunks) == docs


# --- load_beir -----------------------------------------------------------------------------


def _write_jsonl(path: Path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def beir_folder(tmp_path):
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    _write_jsonl(
        root / "corpus.jsonl",
        [
            {"_id": "d1", "title": "One", "text": "first doc"},
            {"_id": "d2", "title": "", "text": "second doc"},
            {"_id": "d3", "text": "third doc, no title field"},
        ],
    )
    _write_jsonl(
        root / "queries.jsonl",
        [
            {"_id": "q1", "text": "query one"},
            {"_id": "q2", "text": "query two"},
            {"_id": "q3", "text": "query three"},
            {"_id": "q4", "text": "never judged"},
        ],
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t2\nq2\td3\t0\n", encoding="utf-8"
    )
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td3\t1\n", encoding="utf-8")
    return root


def test_load_beir(beir_folder):
    beir = load_beir(str(beir_folder))
    assert beir == BeirSet(
        name="tiny",
        split="test",
        corpus={
            "d1": ("One", "first doc"),
            "d2": ("", "second doc"),
            "d3": ("", "third doc, no title field"),
        },
        queries={"q1": "query one", "q2": "query two"},
        qrels={"q1": {"d1": 1, "d2": 2}, "q2": {"d3": 0}},
    )


def test_load_beir_other_split(beir_folder):
    beir = load_beir(str(beir_folder), split="train")
    assert beir.split == "train"
    assert beir.queries == {"q3": "query three"}
    assert beir.qrels == {"q3": {"d3": 1}}


@pytest.mark.parametrize(
    "missing, message",
    [
        ("corpus.jsonl", "corpus file not found: .*corpus.jsonl"),
        ("queries.jsonl", "queries file not found: .*queries.jsonl"),
        ("qrels", "qrels folder not found: .*qrels"),
    ],
)
def test_load_beir_missing_file(beir_folder, missing, message):
    target = beir_folder / missing
    if target.is_dir():
        for child in target.iterdir():
            child.unlink()
        target.rmdir()
    else:
        target.unlink()
    with pytest.raises(UsageError, match=message):
        load_beir(str(beir_folder))


def test_load_beir_missing_folder(tmp_path):
    with pytest.raises(UsageError, match="BEIR data set folder not found: .*nowhere"):
        load_beir(str(tmp_path / "nowhere"))


def test_load_beir_unknown_split_lists_available(beir_folder):
    expected = r"no split 'dev' in .*qrels: available splits: test, train"
    with pytest.raises(UsageError, match=expected):
        load_beir(str(beir_folder), split="dev")


def test_load_beir_bad_score_names_line(beir_folder):
    with (beir_folder / "qrels" / "test.tsv").open("a", encoding="utf-8") as fh:
        fh.write("q1\td3\thigh\n")
    with pytest.raises(UsageError, match=r"test.tsv:5: score 'high' is not an integer"):
        load_beir(str(beir_folder))


def test_load_beir_judged_query_without_text(beir_folder):
    with (beir_folder / "qrels" / "test.tsv").open("a", encoding="utf-8") as fh:
        fh.write("q99\td1\t1\n")
    with pytest.raises(UsageError, match="judges 1 queries absent from .*queries.jsonl: q99"):
        load_beir(str(beir_folder))


def test_load_beir_bad_json_names_line(beir_folder):
    with (beir_folder / "corpus.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("{not json\n")
    with pytest.raises(UsageError, match=r"corpus.jsonl:4: not valid JSON"):
        load_beir(str(beir_folder))


# --- write_corpus_tree ---------------------------------------------------------------------

HOSTILE_IDS = [
    "a/b",
    "a b",
    "a_b",
    "../x",
    "../../etc/passwd",
    "/abs",
    "é ü",
    "ü é",
    "x" * 300,
    "x" * 301,
    "",
    ".",
    "..",
    ".hidden",
    "A",
    "a",
    "CON",
    "back\\slash",
    "tab\there",
    "日本語",
]


def _corpus_set(ids, title="T"):
    return BeirSet(
        name="t",
        split="test",
        corpus={doc_id: (title, f"body of {doc_id!r}") for doc_id in ids},
        queries={},
        qrels={},
    )


def test_write_corpus_tree_hostile_ids(tmp_path):
    dest = tmp_path / "out"
    beir = _corpus_set(HOSTILE_IDS)
    mapping = write_corpus_tree(beir, str(dest))

    assert sorted(mapping.values()) == sorted(HOSTILE_IDS)  # every id once: round trip
    on_disk = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert on_disk == sorted(mapping)  # nothing written elsewhere, nothing missing
    assert len({rel.casefold() for rel in mapping}) == len(mapping)  # unique ignoring case
    assert list(tmp_path.iterdir()) == [dest]  # nothing escaped dest
    for rel, doc_id in mapping.items():
        path = dest / rel
        assert path.resolve().is_relative_to(dest.resolve())
        assert "\\" not in rel and not path.name.startswith(".")
        assert len(path.name.encode()) <= 255
        assert rel.isascii()
        assert path.read_text(encoding="utf-8") == f"# T\n\nbody of {doc_id!r}\n"


@pytest.mark.parametrize(
    "title, text, expected",
    [
        ("Title", "Body text.", "# Title\n\nBody text.\n"),
        ("", "Body only.", "Body only.\n"),
        ("Two\nlines", "Body.", "# Two lines\n\nBody.\n"),
    ],
)
def test_write_corpus_tree_markdown(tmp_path, title, text, expected):
    beir = BeirSet(name="t", split="test", corpus={"d1": (title, text)}, queries={}, qrels={})
    mapping = write_corpus_tree(beir, str(tmp_path))
    assert mapping == {"0000/d1.md": "d1"}
    assert (tmp_path / "0000" / "d1.md").read_text(encoding="utf-8") == expected


@pytest.mark.parametrize(
    "count, per_folder, sizes",
    [
        (25, 10, {"0000": 10, "0001": 10, "0002": 5}),
        (10, 10, {"0000": 10}),
        (1001, None, {"0000": 1000, "0001": 1}),  # the default of 1000
    ],
)
def test_write_corpus_tree_spreads_folders(tmp_path, count, per_folder, sizes):
    beir = _corpus_set([f"doc{i}" for i in range(count)])
    kwargs = {} if per_folder is None else {"files_per_folder": per_folder}
    mapping = write_corpus_tree(beir, str(tmp_path), **kwargs)
    assert len(mapping) == count
    found = {d.name: sum(1 for _ in d.iterdir()) for d in tmp_path.iterdir()}
    assert found == sizes


def test_write_corpus_tree_is_repeatable(tmp_path):
    beir = _corpus_set(HOSTILE_IDS)
    first = write_corpus_tree(beir, str(tmp_path))
    assert write_corpus_tree(beir, str(tmp_path)) == first
    assert sum(1 for p in tmp_path.rglob("*") if p.is_file()) == len(HOSTILE_IDS)


# --- real data -----------------------------------------------------------------------------


@pytest.mark.skipif(not SCIFACT.is_dir(), reason=f"BEIR scifact not downloaded at {SCIFACT}")
def test_load_real_scifact():
    beir = load_beir(str(SCIFACT))
    assert beir.name == "scifact"
    assert len(beir.queries) == 300
    assert len(beir.corpus) == 5183
    assert set(beir.queries) == set(beir.qrels)
    assert sum(len(judged) for judged in beir.qrels.values()) == 339
    # Ranking exactly the judged docs, best first, must score perfectly.
    perfect = {qid: sorted(judged, key=judged.get, reverse=True) for qid, judged in beir.qrels.items()}
    assert evaluate(perfect, beir.qrels) == {
        "ndcg@10": pytest.approx(1.0),
        "recall@10": pytest.approx(1.0),
        "recall@100": 1.0,
        "mrr@10": 1.0,
    }
