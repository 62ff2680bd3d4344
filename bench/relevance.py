"""When is an answer weak? Each hit's evidence (``match``) for real queries against noise queries.

    python bench/relevance.py [--backend onnx-int8] [--json]

Indexes SciFact and Cranfield once through the real flow (bench/results/stores/<set>-<backend>,
kept; the default model, so the cosines are the ones users get), then asks each store, through
``Index.search`` (hybrid, k=10, defaults) exactly as a user would:

- **real** queries: SciFact's train split (809, the only queries the thresholds are chosen on),
  SciFact's test split (300) and Cranfield's (225). A real query whose top 10 holds a
  judged-relevant document must not be weak;
- **noise** queries, which nothing in the corpus answers: the other set's queries (Cranfield's
  aeronautics asked of SciFact's biomedical abstracts, and the reverse), and strings of 5 words
  drawn at random (seeded, by frequency, stop words left out) from the other corpus's text.

Every rule of the family in :mod:`quarry.search.relevance` — a hit is strong when its cosine
reaches ``c``, or it holds at least ``min(t, of)`` of the query's words and a share ``s`` of them
— is scored offline over the same hits: "weak" recall (noise answers called weak) and the false
weak rate (real answers holding a relevant document called weak). The rule picked is the one
with the highest noise recall on the tuning pool (SciFact train + noise asked of SciFact) whose
false weak rate there stays at or under ``--max-false-weak`` (2%: a weak answer
becomes "not found" without asking the model, so a real answer lost costs more than noise let through); the table then shows it on the
held-out pools (SciFact test, Cranfield), with precision of "weak" over each pool (real answers
holding a relevant document + noise answers). Writes bench/results/relevance.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

import numpy as np
from common import ROOT, SHARED

BEIR = SHARED / "beir"
SETS = ("scifact", "cranfield")
K = 10
NOISE_WORDS = 5
SEED = 47
COSINES = [round(c, 3) for c in np.arange(0.20, 0.701, 0.025)] + [9.0]  # 9: the vector never vouches alone
TERMS = [1, 2, 3, 99]  # 99: BM25 never vouches alone
SHARES = [0.0, 0.25, 0.34, 0.5, 0.67, 0.75, 1.0]


def store_of(name: str, backend: str):
    """The kept store of one set (indexed through the real flow when absent) and path -> doc id."""
    from quarry.eval.evaluation import load_beir, write_corpus_tree

    stores = ROOT / "bench" / "results" / "stores"
    store = stores / f"{name}-{backend}"
    beir = load_beir(str(BEIR / name), "test")
    tree = store.parent / f"{store.name}-corpus" / beir.name
    mapping = write_corpus_tree(beir, str(tree))
    if not (store / "CURRENT").exists():  # kept between runs: the corpus does not change
        from quarry.flows.orchestration import prefect_api

        with prefect_api(stores / "logs"):
            from quarry.flows.index import index_flow

            index_flow([str(tree)], db=str(store))
    return store, {str((tree / rel).resolve()): doc for rel, doc in mapping.items()}


def noise_strings(corpus: dict, n: int, rng: random.Random) -> list[str]:
    """``n`` strings of :data:`NOISE_WORDS` words drawn by frequency from a corpus's text."""
    from quarry.retrieval.stopwords import STOPWORDS

    words = [
        w
        for title, text in corpus.values()
        for w in f"{title} {text}".lower().split()
        if w.isalpha() and len(w) > 2 and w not in STOPWORDS
    ]
    return [" ".join(rng.choice(words) for _ in range(NOISE_WORDS)) for _ in range(n)]


def collect(backend: str) -> dict:
    """{set: {pool: [{"query", "relevant": [bool per hit] | None, "matches": [match per hit]}]}}."""
    import quarry
    from quarry.eval.evaluation import load_beir

    rng = random.Random(SEED)
    beirs = {
        name: {
            split: load_beir(str(BEIR / name), split)
            for split in (("train", "test") if name == "scifact" else ("test",))
        }
        for name in SETS
    }
    out = {}
    for name in SETS:
        other = next(n for n in SETS if n != name)
        store, by_path = store_of(name, backend)
        asked = {
            f"{split}": [(q, b.queries[q], b.qrels[q]) for q in sorted(b.queries)] for split, b in beirs[name].items()
        }
        other_set = beirs[other]["test"]
        asked["noise-queries"] = [(q, other_set.queries[q], None) for q in sorted(other_set.queries)]
        asked["noise-words"] = [
            (f"w{i}", text, None) for i, text in enumerate(noise_strings(other_set.corpus, 300, rng))
        ]
        out[name] = {}
        with quarry.open(store) as idx:
            idx.prime_queries([text for items in asked.values() for _, text, _ in items])
            for pool, items in asked.items():
                rows = []
                for _qid, text, qrels in items:
                    response = idx.search(text, k=K)
                    docs = [by_path.get(r.path, r.path) for r in response.results]
                    rows.append(
                        {
                            "query": text,
                            "weak": response.weak,
                            "relevant": None if qrels is None else [qrels.get(d, 0) > 0 for d in docs],
                            "matches": [r.match for r in response.results],
                        }
                    )
                out[name][pool] = rows
    return out


def arrays(rows: list[dict]) -> tuple[np.ndarray, ...]:
    """Per (answer, hit): cosine, words held, words asked (K hits, padded), and a mask of real hits."""
    n = len(rows)
    cos = np.full((n, K), -9.0)
    held = np.zeros((n, K))
    of = np.ones((n, K))
    for i, row in enumerate(rows):
        for j, m in enumerate(row["matches"]):
            if m["vector"] is not None:
                cos[i, j] = m["vector"]["cosine"]
            if m["bm25"] is not None:
                held[i, j], of[i, j] = m["bm25"]["matched"], m["bm25"]["of"]
    return cos, held, of


def weak_of(rows: list[dict], c: float, t: int, s: float) -> np.ndarray:
    """Per answer: weak under the rule (c, t, s)."""
    cos, held, of = arrays(rows)
    strong = (cos >= c) | ((held >= np.minimum(t, of)) & (held >= s * of) & (held > 0))
    return ~strong.any(axis=1)


def scores(pools: dict, c: float, t: int, s: float) -> dict:
    """False weak rate on real answers holding a relevant hit, weak rate on the other real
    answers and on each noise pool, and weak's precision/recall over real-with-relevant + noise."""
    out = {}
    real = [r for pool, rows in pools.items() if not pool.startswith("noise") for r in rows]
    good = [r for r in real if any(r["relevant"])]
    rest = [r for r in real if not any(r["relevant"])]
    noise = [r for pool, rows in pools.items() if pool.startswith("noise") for r in rows]
    w_good, w_noise = weak_of(good, c, t, s), weak_of(noise, c, t, s)
    out["answers_with_relevant"] = len(good)
    out["false_weak"] = float(w_good.mean()) if len(good) else 0.0
    out["weak_without_relevant"] = float(weak_of(rest, c, t, s).mean()) if rest else 0.0
    for pool, rows in pools.items():
        if pool.startswith("noise"):
            out[f"weak_{pool}"] = float(weak_of(rows, c, t, s).mean())
    caught = int(w_noise.sum())
    flagged = caught + int(w_good.sum())
    out["recall"] = caught / len(noise) if noise else 0.0
    out["precision"] = caught / flagged if flagged else 1.0
    # per hit: share of the judged-relevant hits that are strong, and of the noise hits
    cos, held, of = arrays(good)
    hit_strong = (cos >= c) | ((held >= np.minimum(t, of)) & (held >= s * of) & (held > 0))
    rel = np.zeros_like(hit_strong)
    for i, r in enumerate(good):
        rel[i, : len(r["relevant"])] = r["relevant"]
    out["relevant_hits_strong"] = float(hit_strong[rel].mean()) if rel.any() else 0.0
    return out


def choose(pools: dict, max_false_weak: float) -> tuple[tuple, dict]:
    """The rule with the best noise recall whose false weak rate stays within the bound (ties: the
    lower false weak rate, then the simpler rule)."""
    best = None
    for c in COSINES:
        for t in TERMS:
            for s in SHARES:
                if t == 99 and s > 0:
                    continue
                got = scores(pools, c, t, s)
                if got["false_weak"] > max_false_weak:
                    continue
                key = (got["recall"], -got["false_weak"], -t, -c)
                if best is None or key > best[0]:
                    best = (key, (c, t, s), got)
    return best[1], best[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--max-false-weak", type=float, default=0.02)
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="score the hits the last run kept (bench/results/relevance-hits.json) without searching",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ["QUARRY_EMBED_BACKEND"] = args.backend
    from quarry.search import relevance

    hits_file = ROOT / "bench" / "results" / "relevance-hits.json"
    if args.reuse:
        data = json.loads(hits_file.read_text())
    else:
        data = collect(args.backend)
        hits_file.parent.mkdir(parents=True, exist_ok=True)
        hits_file.write_text(json.dumps(data))
    tuning = {
        "train": data["scifact"]["train"],
        "noise-queries": data["scifact"]["noise-queries"],
        "noise-words": data["scifact"]["noise-words"],
    }
    (c, t, s), tuned = choose(tuning, args.max_false_weak)
    shipped = (relevance.COSINE_STRONG, relevance.TERMS_STRONG, relevance.SHARE_STRONG)
    held_out = {
        "scifact test": {k: v for k, v in data["scifact"].items() if k != "train"},
        "cranfield": data["cranfield"],
    }
    table = []
    for label, rule in (
        ("chosen", (c, t, s)),
        ("shipped", shipped),
        ("cosine only", (c, 99, 0.0)),
        ("bm25 only", (9.0, t, s)),
    ):
        for pool_name, pools in (("scifact train (tuning)", tuning), *held_out.items()):
            table.append(
                {
                    "rule": label,
                    "cosine": rule[0],
                    "terms": rule[1],
                    "share": rule[2],
                    "pool": pool_name,
                    **scores(pools, *rule),
                }
            )
    sweep = []  # the chosen rule's BM25 part with the cosine moved: the trade-off around the choice
    for cos in (0.35, 0.375, 0.40, 0.425, 0.45, 0.475, 0.50):
        row = {"cosine": cos}
        for pool_name, pools in (("scifact train (tuning)", tuning), *held_out.items()):
            got = scores(pools, cos, t, s)
            row[pool_name] = {"false_weak": got["false_weak"], "recall": got["recall"]}
        sweep.append(row)
    dists = {}
    for name in SETS:
        for pool, rows in data[name].items():
            cos, held, of = arrays(rows)
            best = cos.max(axis=1)
            dists[f"{name} {pool}"] = {q: round(float(np.quantile(best, q)), 3) for q in (0.05, 0.25, 0.5, 0.75, 0.95)}
    result = {
        "backend": args.backend,
        "k": K,
        "max_false_weak": args.max_false_weak,
        "chosen": {"cosine": c, "terms": t, "share": s},
        "tuning": tuned,
        "table": table,
        "sweep": sweep,
        "best_cosine_quantiles": dists,
    }
    dest = ROOT / "bench" / "results" / "relevance.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(result, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(
        f"chosen on SciFact train + noise (false weak <= {args.max_false_weak:.0%}): cosine >= {c}, "
        f"or >= min({t}, of) words held and a share >= {s}",
        file=out,
    )
    print(
        f"{'rule':<12} {'pool':<23} {'n rel':>6} {'false weak':>10} {'weak no-rel':>11} {'weak noise-q':>12} "
        f"{'weak noise-w':>12} {'precision':>9} {'recall':>7} {'rel hits strong':>15}",
        file=out,
    )
    for row in table:
        print(
            f"{row['rule']:<12} {row['pool']:<23} {row['answers_with_relevant']:>6} {row['false_weak']:>10.3f} "
            f"{row['weak_without_relevant']:>11.3f} {row['weak_noise-queries']:>12.3f} "
            f"{row['weak_noise-words']:>12.3f} {row['precision']:>9.3f} {row['recall']:>7.3f} "
            f"{row['relevant_hits_strong']:>15.3f}",
            file=out,
        )
    print(
        f"the cosine moved, words part kept (false weak / recall): {'cosine':>6} "
        + " ".join(f"{name:>24}" for name in ("scifact train (tuning)", *held_out)),
        file=out,
    )
    for row in sweep:
        print(
            f"{'':<58}{row['cosine']:>6.3f} "
            + " ".join(
                f"{row[name]['false_weak']:>11.3f} / {row[name]['recall']:>.3f}"
                for name in ("scifact train (tuning)", *held_out)
            ),
            file=out,
        )
    print("best cosine per answer (quantiles 5/25/50/75/95%):", file=out)
    for key, qs in dists.items():
        print(f"  {key:<28} " + " ".join(f"{v:>6.3f}" for v in qs.values()), file=out)
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
