"""Question sets drawn from a store's own corpus, their scores, the evals table and the guard on them."""

from __future__ import annotations

import json
import random
import re

import pytest

import quarry
from quarry.core.errors import QualityBelowThreshold, UsageError
from quarry.eval.questions import generate, good_heading
from quarry.eval.sampling import stratified
from quarry.eval.scoring import check_thresholds, metrics_of, parse_thresholds, regressions, run_set
from quarry.eval.sets import export_set, generate_set
from quarry.store import evals

_rng = random.Random(7)
SYLLABLES = ["ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "ve", "zu", "dro", "fle", "gri", "pla", "stu"]
VOCAB = sorted({"".join(_rng.choice(SYLLABLES) for _ in range(_rng.randint(2, 4))) for _ in range(900)})


def _paragraph(rng: random.Random, own: list[str], words: int = 60) -> str:
    # Each document leans on its own words (what a known-item query remembers), among shared ones.
    return " ".join(rng.choice(own) if rng.random() < 0.5 else rng.choice(VOCAB) for _ in range(words)) + "."


def write_corpus(root, docs: int = 24, seed: int = 3) -> None:
    """``docs`` Markdown files in three folders, three titled sections each (about 1,200 characters each)."""
    rng = random.Random(seed)
    for i in range(docs):
        own = rng.sample(VOCAB, 12)
        folder = root / ("alpha", "beta", "gamma")[i % 3]
        folder.mkdir(parents=True, exist_ok=True)
        parts = [f"# Report {own[0]} {own[1]}\n"]
        for s in range(3):
            parts.append(
                f"## {own[2 + s].title()} {own[5 + s]} findings\n\n{_paragraph(rng, own)}\n\n{_paragraph(rng, own)}\n"
            )
        (folder / f"doc{i:02d}.md").write_text("\n".join(parts), encoding="utf-8")


@pytest.fixture(scope="module")
def store(prefect_api, tmp_path_factory):
    from quarry.flows.index import index_flow

    base = tmp_path_factory.mktemp("selfeval")
    write_corpus(base / "tree")
    index_flow([str(base / "tree")], db=str(base / "store"), overrides={"chunk_size": 300})
    return base


def test_generation_is_reproducible_from_a_seed(store):
    with quarry.open(store / "store") as idx:
        for method in ("known-item", "known-item-popular", "headings"):
            first = generate(idx, 20, method, seed=5)[1]
            again = generate(idx, 20, method, seed=5)[1]
            other = generate(idx, 20, method, seed=6)[1]
            assert len(first) == 20
            assert first == again
            assert [q["query"] for q in first] != [q["query"] for q in other]


def test_the_same_tree_indexed_elsewhere_gives_the_same_questions(store, prefect_api):
    """Ids hash the absolute path; the questions of a seed must not depend on where the tree lies."""
    import shutil

    from quarry.flows.index import index_flow

    moved = store / "elsewhere" / "copy of the tree"
    shutil.copytree(store / "tree", moved)
    index_flow([str(moved)], db=str(store / "elsewhere" / "store"), overrides={"chunk_size": 300})

    def asked(db):
        with quarry.open(db) as idx:
            rel = dict(idx.sql("SELECT doc_id, rel_path FROM documents").rows)
            out = {}
            for method in ("known-item", "headings"):
                questions = generate(idx, 30, method, seed=4)[1]
                out[method] = [(q["query"], rel[q["doc_id"]], q["chunk_id"].split(":")[1]) for q in questions]
            return out, set(rel)

    here, ids_here = asked(store / "store")
    there, ids_there = asked(store / "elsewhere" / "store")
    assert not ids_here & ids_there  # other ids: only the order of the relative paths can line them up
    assert len(here["known-item"]) == 30 and len(here["headings"]) == 30
    assert here == there


def test_questions_point_to_real_chunks(store):
    with quarry.open(store / "store") as idx:
        for method in ("known-item", "headings"):
            header, questions = generate(idx, 30, method, seed=1)
            assert header["generation"] == idx.generation
            for q in questions:
                chunk = idx.chunk(q["chunk_id"])
                assert chunk["doc_id"] == q["doc_id"]
                assert chunk["path"] == q["path"]
                assert (chunk["page_start"], chunk["page_end"]) == (q["page_start"], q["page_end"])
                for other in q["chunk_ids"]:
                    assert idx.chunk(other)["doc_id"] == q["doc_id"]
                if method == "known-item":
                    text = chunk["text"].lower()
                    assert any(term in text for term in q["query"].split())  # drawn from that chunk's document
                else:
                    assert q["query"] == " ".join(chunk["section"].split())


def test_known_item_terms_come_from_the_document(store):
    with quarry.open(store / "store") as idx:
        questions = generate(idx, 40, "known-item", seed=2)[1]
        for q in questions:
            doc = idx.document(q["doc_id"], text=(0, 100))
            text = " ".join(c["text"] for c in doc["chunks"]).lower()
            from_doc = [t for t in q["query"].split() if t in text]
            assert len(from_doc) >= len(q["query"].split()) - 2  # the rest is collection noise
            assert 2 <= len(q["query"].split()) <= 6


def test_stratified_sample_gives_each_folder_a_share():
    items = [("big", i) for i in range(100)] + [("small", i) for i in range(5)] + [("other", i) for i in range(5)]
    picked = stratified(items, lambda item: item[0], 12, random.Random(0))
    counts = {name: sum(1 for p in picked if p[0] == name) for name in ("big", "small", "other")}
    assert counts == {"big": 4, "small": 4, "other": 4}
    assert len(stratified(items, lambda item: item[0], 500, random.Random(0))) == len(items)


@pytest.mark.parametrize(
    "title, good",
    [
        ("Page 3", False),
        ("Figure 2.1", False),
        ("", False),
        ("Intro", True),
        ("Rates", True),
        ("Cost", False),
        ("Travel expenses", True),
        ("iv", False),
    ],
)
def test_good_heading(title, good):
    assert good_heading(title) is good


def test_a_broken_store_scores_lower_on_the_same_questions(store, prefect_api):
    """One chunk per document and the words shuffled across documents: the normal store's questions must
    score lower there, at every level (the metric can fail)."""
    from quarry.flows.index import index_flow

    broken_tree = store / "broken" / "tree"
    rng = random.Random(0)
    files = sorted((store / "tree").rglob("*.md"))
    texts = [f.read_text(encoding="utf-8").split() for f in files]
    pool = [w for t in texts for w in t]
    rng.shuffle(pool)
    at = 0
    for f, words in zip(files, texts):
        dest = broken_tree / f.relative_to(store / "tree")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(" ".join(pool[at : at + len(words)]), encoding="utf-8")
        at += len(words)
    index_flow([str(broken_tree)], db=str(store / "broken" / "store"), overrides={"chunk_size": 100_000})

    with quarry.open(store / "store") as idx:
        header, path = generate_set(idx, 40, "known-item", seed=3, name="ki")
        good = run_set(idx, "ki", ("bm25", "hybrid"), 10, record=False)
    # The same questions, pointed at the broken store's ids of the same relative paths.
    with quarry.open(store / "broken" / "store") as idx:
        ids = dict(idx.sql("SELECT rel_path, doc_id FROM documents").rows)
        rel = {d: r for r, d in quarry.open(store / "store").sql("SELECT rel_path, doc_id FROM documents").rows}
        moved = store / "broken" / "ki.jsonl"
        with moved.open("w") as fh:
            for line in path.read_text().splitlines():
                q = json.loads(line)
                new = ids[rel[q["doc_id"]]]
                q["chunk_ids"] = [f"{new}:{c.split(':')[1]}" for c in q["chunk_ids"]]
                q["doc_id"], q["chunk_id"] = new, q["chunk_ids"][0]
                fh.write(json.dumps(q) + "\n")
        bad = run_set(idx, str(moved), ("bm25", "hybrid"), 10, record=False)
    for g, b in zip(good["rows"], bad["rows"]):
        assert g["metrics"]["recall@10"] >= 0.8, g
        for name in ("recall@10", "mrr@10", "chunk_recall@10", "chunk_mrr@10"):
            assert b["metrics"][name] < g["metrics"][name], (g["mode"], name)


def test_results_go_to_the_evals_table(store):
    db = store / "store"
    with quarry.open(db) as idx:
        generate_set(idx, 10, "headings", seed=0, name="h")
        before = len(evals.rows(db))
        run_set(idx, "h", ("bm25", "hybrid"), 5)
        result = idx.sql(
            "SELECT set_name, method, mode, k, generation, questions, recall, mrr, "
            "metrics->>'chunk_recall@5' AS chunk FROM evals WHERE set_name = 'h' ORDER BY mode"
        )
        assert len(evals.rows(db)) == before + 2
        assert [r[:6] for r in result.rows] == [
            ("h", "headings", "bm25", 5, idx.generation, 10),
            ("h", "headings", "hybrid", 5, idx.generation, 10),
        ]
        assert all(0 <= r[6] <= 1 and float(r[8]) >= 0 for r in result.rows)
        latest = idx.evals(latest=True)
        assert {("h", "bm25"), ("h", "hybrid")} <= {(e["set_name"], e["mode"]) for e in latest}
        assert idx.status()["last_evals"] == latest


def test_export_jsonl_and_beir(store, tmp_path):
    from quarry.eval.evaluation import load_beir

    db = store / "store"
    with quarry.open(db) as idx:
        header, path = generate_set(idx, 8, "known-item", seed=9, name="exp")
    export_set(db, "exp", str(tmp_path / "q.jsonl"))
    assert (tmp_path / "q.jsonl").read_text() == path.read_text()
    export_set(db, "exp", str(tmp_path / "beir"), "beir")
    (tmp_path / "beir" / "corpus.jsonl").write_text("")  # the corpus is the store; BEIR's loader wants the file
    beir = load_beir(str(tmp_path / "beir"))
    questions = [json.loads(line) for line in path.read_text().splitlines()]
    assert beir.queries == {q["id"]: q["query"] for q in questions}
    assert beir.qrels == {q["id"]: {q["doc_id"]: 1} for q in questions}


def test_thresholds_and_regressions():
    assert parse_thresholds(["recall@10=0.8,page_mrr@5=.5"]) == {"recall@10": 0.8, "page_mrr@5": 0.5}
    with pytest.raises(UsageError, match="METRIC=VALUE"):
        parse_thresholds(["recall=0.8"])
    check_thresholds({"hybrid": {"recall@10": 0.85}}, {"recall@10": 0.8})
    with pytest.raises(QualityBelowThreshold, match=r"hybrid recall@10 0\.750 < 0\.800"):
        check_thresholds({"bm25": {"recall@10": 0.9}, "hybrid": {"recall@10": 0.75}}, {"recall@10": 0.8})
    with pytest.raises(UsageError, match="no such metric"):
        check_thresholds({"hybrid": {"recall@10": 0.9}}, {"recall@20": 0.8})
    old = {"set_name": "s", "mode": "hybrid", "k": 10, "generation": 3, "metrics": {"recall@10": 0.9, "mrr@10": 0.5}}
    new = {"set_name": "s", "mode": "hybrid", "k": 10, "generation": 4, "metrics": {"recall@10": 0.84, "mrr@10": 0.5}}
    assert regressions([old], new, 0.05) == "recall@10 0.840 < 0.900 (generation 3) - 0.05"
    assert regressions([old], new, 0.1) is None
    assert regressions([{**old, "mode": "bm25"}], new, 0.0) is None  # another mode is no baseline
    assert metrics_of([{"": 1, "page_": 2, "chunk_": None}, {"": 11, "page_": None, "chunk_": 3}], 10) == {
        "recall@10": 0.5,
        "mrr@10": 0.5,
        "page_recall@10": 0.5,
        "page_mrr@10": 0.25,
        "chunk_recall@10": 0.5,
        "chunk_mrr@10": pytest.approx(1 / 6),
    }


def test_cli_generate_run_fail_under(store, cli):
    db = store / "store"
    gen = cli("eval", "generate", "--db", db, "-n", "12", "--method", "headings", "--name", "cli-h", "--json")
    assert gen.returncode == 0, gen.stderr
    assert json.loads(gen.stdout)["questions"] == 12
    ok = cli("eval", "run", "cli-h", "--db", db, "--mode", "bm25", "--fail-under", "recall@10=0.5")
    assert ok.returncode == 0, ok.stderr
    assert "bm25" in ok.stdout
    low = cli("eval", "run", "cli-h", "--db", db, "--mode", "bm25", "--fail-under", "recall@10=1.01")
    assert low.returncode == 5
    assert "quality below threshold: bm25 recall@10" in low.stderr and "< 1.010" in low.stderr
    assert "bm25" in low.stdout  # the figures are printed before the failure
    bad = cli("eval", "run", "cli-h", "--db", db, "--fail-under", "recall=1")
    assert bad.returncode == 2 and "METRIC=VALUE" in bad.stderr
    missing = cli("eval", "run", "nope", "--db", db)
    assert missing.returncode == 1 and "no question set 'nope'" in missing.stderr
    sql = cli("sql", "SELECT count(*) AS n FROM evals WHERE set_name = 'cli-h'", "--db", db, "--format", "json")
    assert json.loads(sql.stdout)[0]["n"] == 2  # the failing run is recorded too
    answers = cli("eval", "run", "cli-h", "--db", db, "--answers", "--no-record")
    if not hasattr(quarry.search.query.Index, "answer"):
        assert answers.returncode == 2 and "--answers needs the answers path" in answers.stderr


def test_generate_as_principal_reads_only_readable_documents(store, prefect_api, tmp_path):
    from quarry.flows.index import index_flow

    rules = tmp_path / "acl.yaml"
    rules.write_text(
        '- path: "alpha/**"\n  principals: ["group:a"]\n- path: "**"\n  principals: ["group:staff"]\n', encoding="utf-8"
    )
    db = tmp_path / "acl-store"
    index_flow([str(store / "tree")], db=str(db), overrides={"chunk_size": 300, "acl_rules": str(rules)})
    with quarry.open(db) as idx:
        paths = {q["path"] for q in generate(idx, 50, "known-item", seed=0, principals=["group:a"])[1]}
        assert paths and all("/alpha/" in p for p in paths)
        every = {q["path"] for q in generate(idx, 50, "known-item", seed=0)[1]}
        assert any("/beta/" in p for p in every)


def test_quarry_eval_beir_dir_still_works_and_records(cli, tmp_path):
    beir = tmp_path / "tiny"
    (beir / "qrels").mkdir(parents=True)
    docs = {
        "d1": "volcanic ash clouds ground flights",
        "d2": "sourdough bread needs a starter culture",
        "d3": "tidal energy from ocean currents",
        "d4": "honeybees communicate by dancing",
    }
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
    )
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "bread starter"}\n{"_id": "q2", "text": "bee dance"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td4\t1\n")
    db = tmp_path / "store"
    done = cli("eval", beir, "--db", db, "--mode", "bm25", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["modes"]["bm25"]["mrr@10"] == pytest.approx(0.5, abs=0.5)
    rows = cli(
        "sql",
        "SELECT set_name, method, mode, k, questions, metrics->>'ndcg@10' AS ndcg FROM evals",
        "--db",
        db,
        "--format",
        "json",
    )
    (row,) = json.loads(rows.stdout)
    assert row["set_name"] == "beir-tiny-test" and row["method"] == "beir" and row["questions"] == 2
    assert float(row["ndcg"]) == json.loads(done.stdout)["modes"]["bm25"]["ndcg@10"]


def test_llm_method_on_a_chat_server(store):
    """A question per sampled chunk, filtered; failures counted; the same seed asks nothing again (cached)."""

    from fakeopenai import FakeOpenAI

    from quarry.core.openai.retry import RetryPolicy
    from quarry.core.settings import Settings
    from quarry.eval.llmquestions import FIRST_WORDS, QuestionWriter
    from quarry.ingest.llm.client import LLMRuntime

    def handler(request):
        passage = request["messages"][-1]["content"].removeprefix("Passage:\n")
        words = passage.split()
        kind = kind_of(request)
        if kind == 0:
            return {"question": "What is on page 3?", "answer": words[-1]}
        if kind == 1:
            return "not json at all"
        # an answer from past the passage's first words (the filter rejects one that opens it), so
        # that which chunks the seed draws (their ids follow the tree's path) cannot starve the set
        head = {t.lower() for t in re.findall(r"\w+", passage)[:FIRST_WORDS]}
        at = next(
            (i for i in range(len(words) - 1, 0, -1) if words[i].isalpha() and words[i].lower() not in head),
            len(words) - 3,
        )
        return {
            "question": f"Which word follows {words[at - 1]} in the findings about {words[0]}?",
            "answer": words[at],
        }

    kinds: dict[str, int] = {}

    def kind_of(request):
        """The first passage asked gets a question the filter rejects, the second a reply that is
        no JSON, every other a good question: the same for a passage each time it is asked, and the
        two bad ones come first (one request at a time), so both are counted before the set fills."""
        passage = request["messages"][-1]["content"]
        return kinds.setdefault(passage, min(len(kinds), 2))

    db = store / "store"
    with FakeOpenAI() as server:
        server.chat_handler = handler
        settings = Settings.from_env(
            embed_backend="hash", llm_base_url=server.base_url, llm_api_key="k", llm_model="m", llm_concurrency=1
        )

        def writer():
            return QuestionWriter(LLMRuntime(settings, db, policy=RetryPolicy(attempts=1, base=0.001, cap=0.01)))

        with quarry.open(db) as idx:
            header, path = generate_set(idx, 6, "llm", seed=4, name="llm-4", llm=writer())
            asked = len(server.requests)
            again, _ = generate_set(idx, 6, "llm", seed=4, name="llm-4b", llm=writer())
            # answers are cached in the store's LLM cache: only the failed ones are asked again
            assert all(kind_of(r.json) == 1 for r in server.requests[asked:])
            questions = [json.loads(line) for line in path.read_text().splitlines()]
            assert header["questions"] == len(questions) == 6
            assert header["rejected"]["formatting"] >= 1 and header["rejected"]["failed"] >= 1
            assert [q["query"] for q in questions] == [
                json.loads(line)["query"] for line in evals.set_path(db, "llm-4b").read_text().splitlines()
            ]
            for q in questions:
                chunk = idx.chunk(q["chunk_id"])
                assert chunk["doc_id"] == q["doc_id"] and q["answer"] in chunk["text"].split()
                assert q["query"].startswith("Which word follows")
            assert len({q["doc_id"] for q in questions}) == 6  # one chunk per sampled document


def test_a_run_followed_by_its_evaluation_fails_when_quality_drops(store, prefect_api, tmp_path):
    import shutil

    from quarry.flows.index import index_flow

    from quarry.eval.scoring import evaluate_generation

    tree, db = tmp_path / "tree", tmp_path / "store"
    shutil.copytree(store / "tree", tree)
    index_flow([str(tree)], db=str(db), overrides={"chunk_size": 300})
    with quarry.open(db) as idx:
        generate_set(idx, 30, "known-item", seed=0, name="nightly")
    first = evaluate_generation(db, ["nightly", "absent"], margin=0.05)
    assert first["missing"] == ["absent"] and first["flagged"] == [] and len(first["rows"]) == 1
    assert evaluate_generation(db, ["nightly"])["already"] == ["nightly"]  # once per generation

    # Every file's words are replaced (document ids stay: same paths): the next generation answers worse.
    files = sorted(tree.rglob("*.md"))
    for f in files:
        f.write_text(" ".join(random.Random(f.name).sample(VOCAB, 150)), encoding="utf-8")
    with pytest.raises(QualityBelowThreshold, match=r"nightly hybrid: recall@10 0\.\d+ < 0\.\d+ \(generation 1\)"):
        index_flow(
            [str(tree)], db=str(db), overrides={"chunk_size": 300}, evaluate={"sets": ["nightly"], "margin": 0.05}
        )
    with quarry.open(db) as idx:
        assert idx.generation == 2  # the run committed; its evaluation failed it
        (row,) = [r for r in idx.evals("nightly") if r["generation"] == 2]
        assert row["flagged"].startswith("recall@10")
        flagged = idx.sql("SELECT generation, flagged IS NOT NULL FROM evals WHERE set_name = 'nightly' ORDER BY 1")
        assert flagged.rows == [(1, False), (2, True)]
    # A rollback is a new generation over generation 1's layers: the evaluations stay, and the next
    # evaluation (generation 3) compares with generation 2's row, the latest earlier one.
    from quarry.store.handle import open_store
    from quarry.store.rollback import rollback

    rollback(open_store(db))
    after = evaluate_generation(db, ["nightly"], margin=0.05)
    assert after["generation"] == 3 and after["flagged"] == []  # better than generation 2
    with quarry.open(db) as idx:
        assert idx.sql("SELECT generation FROM evals WHERE set_name = 'nightly' ORDER BY 1").rows == [(1,), (2,), (3,)]
        assert idx.evals("nightly")[-1]["recall"] == first["rows"][0]["recall"]  # generation 1's content again
