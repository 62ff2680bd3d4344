"""Do generated question sets rank configurations as human judgments do?

    python bench/selfeval.py [--sets scifact,cranfield] [--docs 1000] [-n 200] [--methods M,...]
                             [--handbook [--handbook-parts A,B]]

For each BEIR set: the corpus (on SciFact a subset: every document a test query judges, plus
random others up to --docs, seed 0; Cranfield whole) is written as one Markdown file per record,
indexed three times (chunk size 400, 800 and 1600 characters) into
bench/results/selfeval/<set>/cs<size> (kept: a second run is an unchanged re-index), and scored in
12 configurations: {bm25, vector, hybrid tmm, hybrid rrf} x the three chunk sizes. Human side:
nDCG@10 on the test judgments. Generated side: document MRR@10 and recall@10 of each method's set
(-n questions, seed 0) drawn from the chunk-400 store; the same questions are scored on every store
(document ids are equal: same files). Reported: Kendall's tau-b between the configurations' order by
each generated metric and by nDCG@10, over all 12 and over the 6 hybrid ones (fusion x chunk size).

--methods takes quarry's methods (known-item, known-item-popular, headings; llm with the chat endpoint
of $QUARRY_LLM_BASE_URL and $QUARRY_LLM_MODEL) and two probes that
live only here, to test whether questions further from the documents' own words rank retrievers as
people do:
- ``sentence``: a sentence of the document's chunk as the query, after the Inverse Cloze Task
  (Lee, Chang & Toutanova, ACL 2019), with its rarest half of content words left out (a reader who
  does not remember the document's exact terms);
- ``substitution``: the same sentence, its rarest half of content words each replaced by a word that
  co-occurs with it in other documents but not in this one (query variation by term substitution,
  after Penha, Camara & Hauff, ECIR 2022; the neighbours from document co-occurrence, not from the
  embedding model, which would favour vector search by construction).

With --handbook, two folders of ../shared/data/trees/sourcegraph-handbook (--handbook-parts)
are indexed and scored (known-item and headings, three modes) with the time to generate and to score
100 questions. `--sets ""` runs only that.

Writes bench/results/selfeval.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from collections import Counter, defaultdict

from common import ROOT, SHARED

RESULTS = ROOT / "bench" / "results" / "selfeval"
CHUNK_SIZES = (400, 800, 1600)
METHODS = ("known-item", "headings")
PROBES = ("sentence", "substitution")
CONFIGS = (("bm25", None), ("vector", None), ("hybrid", "tmm"), ("hybrid", "rrf"))


def kendall_tau_b(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b of two paired lists (ties in either count as neither concordant nor discordant)."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(xs)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5
    return (concordant - discordant) / denom if denom else 0.0


def subset(beir, docs: int, seed: int = 0):
    """The judged documents of the split plus random others, up to ``docs`` (all when the corpus is smaller)."""
    from quarry.eval.evaluation import BeirSet

    if docs <= 0 or len(beir.corpus) <= docs:
        return beir
    judged = {d for rels in beir.qrels.values() for d in rels}
    others = sorted(d for d in beir.corpus if d not in judged)
    keep = judged | set(random.Random(seed).sample(others, max(0, docs - len(judged))))
    corpus = {d: v for d, v in beir.corpus.items() if d in keep}
    return BeirSet(beir.name, beir.split, corpus, beir.queries, beir.qrels)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_TOKEN = re.compile(r"\S+")
_EDGE = ".,;:()[]{}\"'!?"


def _corpus_terms(idx) -> dict[str, set[str]]:
    """Each document's set of query terms (quarry.eval.questions.words), from the chunk texts."""
    from quarry.core.sqlfiles import load_sql
    from quarry.eval.questions import words

    docs: dict[str, set[str]] = defaultdict(set)
    cur = idx.snapshot.con.execute(load_sql("eval_term_counts"))
    while batch := cur.fetchmany(4096):
        for doc_id, text in batch:
            docs[doc_id].update(words(text or ""))
    return docs


class _Neighbours:
    """Words that co-occur (in documents) with a word, scored by the cosine of their document sets."""

    def __init__(self, docs: dict[str, set[str]]):
        self.docs = docs
        self.df: Counter = Counter(t for terms in docs.values() for t in terms)
        self.postings: dict[str, list[str]] = defaultdict(list)
        for doc_id in sorted(docs):
            for t in docs[doc_id]:
                self.postings[t].append(doc_id)

    def pick(self, term: str, doc_id: str, rng: random.Random, top: int = 3) -> str | None:
        own = self.docs.get(doc_id, set())
        together: Counter = Counter()
        for other in self.postings.get(term, ()):
            if other != doc_id:
                together.update(self.docs[other])
        scored = sorted(
            (
                (count / math.sqrt(self.df[u] * self.df[term]), u)
                for u, count in together.items()
                if u not in own and u != term and count >= 2
            ),
            reverse=True,
        )[:top]
        return scored[rng.randrange(len(scored))][1] if scored else None


def probe_questions(idx, n: int, method: str, seed: int = 0, share: float = 0.5) -> list[dict]:
    """The ``sentence`` and ``substitution`` probes (see the module's docstring): one question per sampled
    document, stratified as quarry's methods sample, reproducible from ``seed``."""
    from quarry.eval.questions import _question, read_corpus, words
    from quarry.eval.sampling import stratified, stratum

    rng = random.Random(f"{method}:{seed}")
    with idx.pinned():
        corpus = read_corpus(idx)
        terms = _corpus_terms(idx)
        counts: Counter = Counter(t for ts in terms.values() for t in ts)
        neighbours = _Neighbours(terms) if method == "substitution" else None
        picked: list[dict] = []
        for _ in range(4):
            picked += stratified(corpus.documents, stratum, n - len(picked), rng)
            if len(picked) >= n:
                break
        by_doc: dict[str, list[dict]] = defaultdict(list)
        for row in corpus.read_chunks(sorted({d["doc_id"] for d in picked})):
            by_doc[row["doc_id"]].append(row)
        out: list[dict] = []
        for doc in picked:
            sentences = [
                (chunk, text)
                for chunk in by_doc.get(doc["doc_id"], [])
                for text in _SENTENCE_END.split(chunk["text"] or "")
                if 6 <= len(words(text)) <= 40
            ]
            if not sentences:
                continue
            chunk, text = sentences[rng.randrange(len(sentences))]
            content = sorted(set(words(text)), key=lambda t: (counts[t], t))
            rare = content[: max(1, round(share * len(content)))]
            swap = {t: (neighbours.pick(t, doc["doc_id"], rng) if neighbours else None) for t in rare}
            query = []
            for token in _TOKEN.findall(text):
                word = token.lower().strip(_EDGE)
                if word in swap:
                    if swap[word]:
                        query.append(swap[word])
                else:
                    query.append(token)
            if len(words(" ".join(query))) < 2:
                continue
            out.append(
                _question(method, len(out) + 1, " ".join(query), doc, chunk, [chunk["chunk_id"]], corpus.generation)
            )
    return out


def make_set(idx, n: int, method: str) -> list[dict]:
    from quarry.eval.questions import generate

    if method in PROBES:
        return probe_questions(idx, n, method)
    if method != "llm":
        return generate(idx, n, method, seed=0)[1]
    from quarry.core.settings import Settings
    from quarry.eval.llmquestions import QuestionWriter

    writer = QuestionWriter.from_settings(Settings.from_env(), idx.store)  # $QUARRY_LLM_BASE_URL, _MODEL, _API_KEY
    try:
        return generate(idx, n, "llm", seed=0, llm=writer)[1]
    finally:
        writer.close()


def human_ndcg(idx, beir, by_path: dict[str, str], mode: str, fusion: str | None) -> float:
    from quarry.eval.evaluation import chunk_ranking_to_docs, evaluate

    kwargs = {"fusion": fusion} if fusion else {}
    rankings = {}
    for qid, text in beir.queries.items():
        results = idx.search(text, k=50, mode=mode, **kwargs).results
        rankings[qid] = chunk_ranking_to_docs([by_path.get(r.path, r.path) for r in results])
    return evaluate(rankings, beir.qrels)["ndcg@10"]


def run_set(name: str, docs: int, n: int, index_flow, methods=METHODS) -> dict:
    import quarry
    from quarry.eval.evaluation import load_beir, write_corpus_tree
    from quarry.eval.scoring import score_set

    beir = subset(load_beir(str(SHARED / "beir" / name)), docs if name == "scifact" else 0)
    base = RESULTS / name
    tree = base / "tree"
    mapping = write_corpus_tree(beir, str(tree))
    by_path = {str((tree / rel).resolve()): doc_id for rel, doc_id in mapping.items()}
    out = {"set": name, "documents": len(beir.corpus), "queries": len(beir.queries), "configs": [], "index_seconds": {}}
    sets = {}
    for size in CHUNK_SIZES:
        t = time.perf_counter()
        index_flow([str(tree)], db=str(base / f"cs{size}"), overrides={"chunk_size": size})
        out["index_seconds"][size] = round(time.perf_counter() - t, 1)
        with quarry.open(base / f"cs{size}") as idx:
            if not sets:
                for method in methods:
                    t = time.perf_counter()
                    sets[method] = make_set(idx, n, method)
                    out[f"{method}_generate_seconds"] = round(time.perf_counter() - t, 2)
                    out[f"{method}_questions"] = len(sets[method])
            idx.prime_queries(list(beir.queries.values()))
            for mode, fusion in CONFIGS:
                row = {
                    "chunk_size": size,
                    "mode": mode,
                    "fusion": fusion,
                    "ndcg@10": human_ndcg(idx, beir, by_path, mode, fusion),
                }
                for method, questions in sets.items():
                    scored = score_set(idx, questions, (mode,), 10, {"fusion": fusion} if fusion else None)[mode]
                    row[f"{method} mrr@10"] = scored["metrics"]["mrr@10"]
                    row[f"{method} recall@10"] = scored["metrics"]["recall@10"]
                    row[f"{method} s/100q"] = round(100 * scored["seconds"] / max(len(questions), 1), 2)
                out["configs"].append(row)
                print(
                    f"  {name} cs{size} {mode} {fusion or ''}: "
                    + ", ".join(f"{k} {v:.3f}" for k, v in row.items() if isinstance(v, float)),
                    file=sys.stderr,
                    flush=True,
                )
    out["tau"] = taus(out["configs"])
    return out


def taus(configs: list[dict]) -> dict:
    """Kendall's tau-b between nDCG@10 and each generated metric: over every configuration, and over
    the hybrid ones only (fusion x chunk size: the choice a team makes once the retrievers are set)."""
    out = {}
    for scope, rows in (("all", configs), ("hybrid", [c for c in configs if c["mode"] == "hybrid"])):
        human = [c["ndcg@10"] for c in rows]
        for key in sorted(k for k in rows[0] if k.endswith(("mrr@10", "recall@10")) and " " in k):
            out[f"{scope}: {key}"] = kendall_tau_b([c[key] for c in rows], human)
    return out


HANDBOOK_PARTS = ("content/company-info-and-process", "content/benefits-pay-perks")


def run_handbook(n: int, index_flow, parts=HANDBOOK_PARTS) -> dict:
    import quarry
    from quarry.eval.questions import generate
    from quarry.eval.scoring import score_set

    tree = SHARED / "trees" / "sourcegraph-handbook"
    store = RESULTS / "handbook"
    t = time.perf_counter()
    index_flow([str(tree / p) for p in parts], db=str(store))
    out = {
        "set": "sourcegraph-handbook",
        "parts": list(parts),
        "index_seconds": round(time.perf_counter() - t, 1),
        "rows": [],
    }
    with quarry.open(store) as idx:
        out["documents"] = idx.status()["documents"]
        out["chunks"] = idx.status()["chunks"]
        for method in ("known-item", "headings"):
            t = time.perf_counter()
            questions = generate(idx, n, method, seed=0)[1]
            gen = time.perf_counter() - t
            for mode in ("bm25", "vector", "hybrid"):
                scored = score_set(idx, questions, (mode,), 10)[mode]
                out["rows"].append(
                    {
                        "method": method,
                        "mode": mode,
                        "questions": len(questions),
                        "generate s/100q": round(100 * gen / max(len(questions), 1), 2),
                        "score s/100q": round(100 * scored["seconds"] / max(len(questions), 1), 2),
                        **scored["metrics"],
                    }
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="scifact,cranfield")
    ap.add_argument("--docs", type=int, default=1000, help="SciFact subset size (judged documents + random others).")
    ap.add_argument("-n", type=int, default=200, help="Questions per generated set.")
    ap.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"Question methods to compare with the judgments: quarry's, or the probes {', '.join(PROBES)}.",
    )
    ap.add_argument("--handbook", action="store_true")
    ap.add_argument(
        "--handbook-parts",
        default=",".join(HANDBOOK_PARTS),
        help="Folders of the handbook tree to index (the whole tree takes most of an hour on 2 shared cores).",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--report", action="store_true", help="Print the tables of the last run's JSON; run nothing.")
    args = ap.parse_args()
    dest = ROOT / "bench" / "results" / "selfeval.json"
    if args.report:
        results = json.loads(dest.read_text())
        for r in results["sets"]:
            r["tau"] = taus(r["configs"])
        report(results, sys.stdout)
        return
    backend = os.environ.get("QUARRY_EMBED_BACKEND", "default")
    from quarry.eval.questions import METHODS as QUARRY_METHODS

    methods = tuple(m for m in args.methods.split(",") if m)
    unknown = [m for m in methods if m not in PROBES and m not in QUARRY_METHODS]
    if unknown:
        ap.error(f"unknown method(s) {', '.join(unknown)}")
    from quarry.flows.orchestration import prefect_api

    results = {"backend": backend, "load": os.getloadavg(), "sets": [], "handbook": None}
    with prefect_api(RESULTS / "logs"):
        from quarry.flows.index import index_flow

        for name in [s for s in args.sets.split(",") if s]:
            if not (SHARED / "beir" / name).is_dir():
                print(f"skipping {name}: not found", file=sys.stderr)
                continue
            results["sets"].append(run_set(name, args.docs, args.n, index_flow, methods))
        if args.handbook:
            results["handbook"] = run_handbook(
                args.n, index_flow, tuple(p for p in args.handbook_parts.split(",") if p)
            )
    results["load_after"] = os.getloadavg()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() and not results["sets"]:  # a handbook-only run keeps the BEIR sets of the last run
        results["sets"] = [{**r, "tau": taus(r["configs"])} for r in json.loads(dest.read_text()).get("sets", [])]
    dest.write_text(json.dumps(results, indent=2))
    report(results, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(results, indent=2))


def report(results: dict, table) -> None:
    for r in results["sets"]:
        print(
            f"\n{r['set']}: {r['documents']} documents, {r['queries']} judged queries; "
            + ", ".join(f"{r[k]} {k[: -len('_questions')]}" for k in r if k.endswith("_questions"))
            + " questions",
            file=table,
        )
        methods = [k[: -len(" mrr@10")] for k in r["configs"][0] if k.endswith(" mrr@10")]
        print(
            f"{'chunk':>5} {'mode':<7} {'fusion':<6} {'nDCG@10':>8} "
            + " ".join(f"{m[:14] + ' MRR':>18} {'R@10':>5}" for m in methods),
            file=table,
        )
        for c in r["configs"]:
            print(
                f"{c['chunk_size']:>5} {c['mode']:<7} {c['fusion'] or '':<6} {c['ndcg@10']:>8.3f} "
                + " ".join(f"{c[m + ' mrr@10']:>18.3f} {c[m + ' recall@10']:>5.3f}" for m in methods),
                file=table,
            )
        print("Kendall's tau-b vs nDCG@10:", file=table)
        for k, v in r["tau"].items():
            print(f"  {k:<32} {v:+.2f}", file=table)
    if results["handbook"]:
        h = results["handbook"]
        print(
            f"\nhandbook ({', '.join(h.get('parts') or [])}): {h['documents']} documents, {h['chunks']} chunks (indexed in {h['index_seconds']} s)",
            file=table,
        )
        print(
            f"{'method':<11} {'mode':<7} {'R@10':>6} {'MRR':>6} {'pageR':>6} {'chunkR':>7} {'gen s/100q':>10} "
            f"{'score s/100q':>12}",
            file=table,
        )
        for row in h["rows"]:
            print(
                f"{row['method']:<11} {row['mode']:<7} {row['recall@10']:>6.3f} {row['mrr@10']:>6.3f} "
                f"{row['page_recall@10']:>6.3f} {row['chunk_recall@10']:>7.3f} {row['generate s/100q']:>10} "
                f"{row['score s/100q']:>12}",
                file=table,
            )
    print(f"\nbackend {results['backend']}; load {results['load']} -> {results['load_after']}", file=table)


if __name__ == "__main__":
    main()
