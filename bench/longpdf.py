"""Long PDFs answered at the right page: page recall@1/@10, document recall@10 and nDCG@10 per
retrieval mode, on three sets of long PDFs.

    python bench/longpdf.py [--set financebench|tenk|kinds] [--data DIR] [--backend onnx-int8] [--pool 250]
                            [--store DIR] [--fresh] [--json]

``--set financebench`` (default): FinanceBench (Islam et al., 2023; the patronus-ai/financebench
repository on GitHub, CC-BY-NC-4.0), whose open-source questions about public companies' SEC
filings each name the filing and the page(s) holding the evidence, as judged by the benchmark's
annotators (``evidence_page_num``, 0-based; here 1-based). quarry does not ship it. To get it,
clone that repository outside the project and point ``--data`` (or ``$QUARRY_FINANCEBENCH``) at
a folder holding its ``data/`` and a ``pdfs/`` folder with the filings to index (any subset:
questions whose evidence filing is absent are left out). Questions are split by filing: those
about the filings in :data:`TEST_FILINGS` are *test*, the others *train*, the only questions a
setting may be chosen on. Two subsets are reported in docs/benchmarks.md: 24 10-K filings of
eight companies (the 11 10-Ks of :data:`TEST_FILINGS` are test), and a *mixed* one of 17 filings
of nine companies — 10-Ks, 10-Qs, 8-Ks and earnings releases of the same company side by side
(MGM Resorts, Johnson & Johnson and Best Buy are test; Amcor, Pfizer, PepsiCo, Foot Locker and
Ulta Beauty train).

``--set tenk``: the same questions over 25 10-K filings of ten companies (:data:`TENK_FILINGS`; the
``--data`` folder may hold more, only these are indexed): the 11 10-Ks of :data:`TEST_FILINGS` are
test, the 10-Ks of American Water Works, Lockheed Martin, Verizon, PepsiCo and Nike train.

``--set kinds``: long PDFs of other kinds — software manuals, an FAQ, a language definition,
format and protocol specifications, a standard, licences, release notes, two research papers, a
report, earnings slides and two sets of quarterly financial statements (18 PDFs, 642 pages) —
with questions judged by page written for this bench (bench/data/longpdf-kinds.json: each
document's kind, split and where to get it; the PDFs are not shipped; most come from Debian
documentation packages). Point ``--data`` (or ``$QUARRY_LONGPDF_KINDS``) at a folder holding them
under the names that file gives; questions about a PDF that is absent are left out. Split by
document.

Without the PDFs the bench says so and stops. A small set on both counts, what parsing and
embedding could do in the time on a busy 2-core machine: one question moves a test mean by
0.03–0.05, so read differences of that size as noise.

The PDFs are indexed once through the real flow (default settings) into ``--store`` (default
``bench/results/stores/<set>-<backend>``) and kept. Each question's vector and BM25 candidates
(top ``--pool`` chunks, raw scores), each chunk's pages and document and the cards' scores are
read once, the question embedded alone as ``quarry search`` embeds it, and cached in
``bench/results/longpdf-<set>-candidates.json`` (``--fresh`` reads them again). Every method
ranks pages (``(file, page)``), a chunk standing for each page it spans, a page keeping its best
place:

- ``bm25``, ``vector``: one retriever's chunks; ``rrf``, ``tmm``: fused chunks
  (:func:`quarry.search.fusion.fuse`);
- ``default``: the library's default, TMM plus the cards' document evidence
  (:func:`quarry.search.fusion.with_documents`, weight ``DOC_WEIGHT``); and a grid of that weight
  and of the retrievers' document consensus (:func:`consensus.with_consensus` in bench/consensus.py, not in
  the default: the ``grid`` lines, ``c`` its weight, ``w`` the cards');
- ``page-bm25``: Okapi BM25 over whole pages (the page's chunk texts joined, each under its
  document's header), quarry's tokens, stemmer and weights;
- ``tmm+page-bm25``: that page ranking fused by TMM with the page ranking of the vector
  retriever (a page scored by its best chunk's cosine);
- ``segments``: the pages the relevant segments (``--segments balanced``) cover, in order;
- ``hybrid (library default, online)``: ``Index.search(question, k=pool/5)`` online, as a check
  that the library does what the ``default`` row says.

Metrics: page recall@1 and @10, nDCG@10 over pages, and document recall@10 (the share of the
question's evidence documents among the documents of its first ten pages). Prints the command,
a table per split and writes bench/results/longpdf-<set>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from common import ROOT

STORES = ROOT / "bench" / "results" / "stores"
K = 10


# The test questions are those about these filings: the 11 10-Ks this bench reported before the
# document evidence existed, and the mixed subset's filings of MGM Resorts, Johnson & Johnson and
# Best Buy; questions about any other filing indexed beside them are train.
TEST_FILINGS = {
    "3M_2018_10K",
    "3M_2022_10K",
    "ADOBE_2017_10K",
    "ADOBE_2022_10K",
    "BOEING_2018_10K",
    "BOEING_2022_10K",
    "CORNING_2020_10K",
    "CORNING_2021_10K",
    "CORNING_2022_10K",
    "GENERALMILLS_2019_10K",
    "GENERALMILLS_2020_10K",
    "MGMRESORTS_2022Q4_EARNINGS",
    "MGMRESORTS_2023Q2_10Q",
    "JOHNSON_JOHNSON_2022Q4_EARNINGS",
    "JOHNSON_JOHNSON_2023Q2_EARNINGS",
    "JOHNSON_JOHNSON_2023_8K_dated-2023-08-30",
    "JOHNSON_JOHNSON_2022_10K",
    "BESTBUY_2024Q2_10Q",
    "BESTBUY_2023_10K",
}
# ``--set tenk``: 25 10-K filings of ten companies. The 11 10-Ks of TEST_FILINGS are test; the other
# companies' 10-Ks (each with questions in FinanceBench's open-source set) are train.
TENK_FILINGS = sorted(
    {f for f in TEST_FILINGS if f.endswith("_10K") and not f.startswith(("JOHNSON", "BESTBUY"))}
    | {f"AMERICANWATERWORKS_{y}_10K" for y in (2020, 2021, 2022)}
    | {f"LOCKHEEDMARTIN_{y}_10K" for y in (2020, 2021, 2022)}
    | {f"VERIZON_{y}_10K" for y in (2021, 2022)}
    | {f"PEPSICO_{y}_10K" for y in (2021, 2022)}
    | {f"NIKE_{y}_10K" for y in (2018, 2019, 2021, 2023)}
)
KINDS = ROOT / "bench" / "data" / "longpdf-kinds.json"
KEYS = ("page R@1", "page R@10", "doc R@10", "nDCG@10")
CONSENSUS_WEIGHTS = [0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0]
DOC_WEIGHTS = [0.0, 0.05, 0.1, 0.15]
OFFLINE = ("bm25", "vector", "rrf", "tmm", "default", "grid")
METHODS = [
    "bm25",
    "vector",
    "rrf",
    "tmm",
    "default",
    "page-bm25",
    "tmm+page-bm25",
    "segments",
    "hybrid (library default, online)",
]


def questions(data: Path, only: list[str] | None = None) -> list[dict]:
    """FinanceBench questions whose evidence filings are all among ``data/pdfs`` (and ``only``,
    when given), each with its split (``test`` when its filings are among :data:`TEST_FILINGS`)."""
    have = {p.stem for p in (data / "pdfs").glob("*.pdf")}
    if only is not None:
        have &= set(only)
    out = []
    for line in (data / "data" / "financebench_open_source.jsonl").read_text().splitlines():
        q = json.loads(line)
        pages = {(e["doc_name"], int(e["evidence_page_num"]) + 1) for e in q["evidence"]}
        if pages and all(doc in have for doc, _ in pages):
            split = "test" if all(doc in TEST_FILINGS for doc, _ in pages) else "train"
            out.append({"id": q["financebench_id"], "question": q["question"], "pages": sorted(pages), "split": split})
    return out


def pages_of(hits, name_of) -> list[tuple[str, int]]:
    """Pages in order of first appearance; a chunk stands for every page it spans."""
    out: dict[tuple[str, int], None] = {}
    for path, first, last in hits:
        if first is None:
            continue
        for page in range(first, (last or first) + 1):
            out.setdefault((name_of(path), page), None)
    return list(out)


def metrics(ranked: list, relevant: list) -> dict:
    """Page recall@1 and @10, page nDCG@10, and document recall@10: the share of the question's
    evidence documents among the documents of the first ten pages."""
    rel = set(relevant)
    top = ranked[:K]
    dcg = sum(1 / math.log2(i + 2) for i, p in enumerate(top) if p in rel)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(rel), K)))
    docs = {d for d, _ in rel}
    return {
        "page R@1": len(rel & set(ranked[:1])) / len(rel),
        "page R@10": len(rel & set(top)) / len(rel),
        "doc R@10": len(docs & {d for d, _ in top}) / len(docs),
        "nDCG@10": dcg / ideal,
    }


class PageBM25:
    """Okapi BM25 over whole pages, with quarry's tokens, stop words, stemmer and weights."""

    def __init__(self, units: list[str]):
        import numpy as np

        from quarry.retrieval.bm25 import bm25_weights, stem_words
        from quarry.retrieval.stopwords import STOPWORDS
        from quarry.retrieval.textnorm import tokens

        self._tok = lambda text: stem_words([t for t in tokens(text) if t not in STOPWORDS])
        vocab: dict[str, int] = {}
        term_ids, rows, tfs = [], [], []
        for row, text in enumerate(units):
            counts: dict[int, int] = {}
            for t in self._tok(text):
                tid = vocab.setdefault(t, len(vocab))
                counts[tid] = counts.get(tid, 0) + 1
            term_ids += counts.keys()
            rows += [row] * len(counts)
            tfs += counts.values()
        term_ids, rows, tf = np.array(term_ids), np.array(rows), np.array(tfs, dtype=np.float64)
        weights, _ = bm25_weights(term_ids, rows, tf, len(vocab), len(units))
        order = np.argsort(term_ids, kind="stable")
        self.rows, self.weights = rows[order], weights[order]
        self.indptr = np.searchsorted(term_ids[order], np.arange(len(vocab) + 1))
        self.vocab, self.n = vocab, len(units)

    def search(self, query: str, n: int):
        import numpy as np

        scores = np.zeros(self.n, dtype=np.float64)
        for t in dict.fromkeys(self._tok(query)):
            tid = self.vocab.get(t)
            if tid is not None:
                a, b = self.indptr[tid], self.indptr[tid + 1]
                np.add.at(scores, self.rows[a:b], self.weights[a:b])
        top = np.argsort(-scores, kind="stable")[:n]
        return [(int(i), float(scores[i])) for i in top if scores[i] > 0]


def page_units(idx) -> tuple[list[tuple[str, int]], list[str]]:
    """``(keys, texts)``: every page of the index, its chunks' text under the filing's header."""
    rows = idx.snapshot.con.execute(
        "SELECT d.path, c.page_start, c.header, c.text FROM chunks c JOIN documents d USING (doc_id) "
        "WHERE c.page_start IS NOT NULL ORDER BY d.path, c.chunk_index"
    ).fetchall()
    pages: dict[tuple[str, int], list[str]] = {}
    for path, page, header, text in rows:
        parts = pages.setdefault((path, page), [header.split("\n")[0]] if header else [])
        parts.append(text)
    keys = list(pages)
    return keys, ["\n".join(pages[k]) for k in keys]


def kinds_questions(data: Path) -> list[dict]:
    """The questions of :data:`KINDS` whose PDF is in ``data``, each with its document's split."""
    spec = json.loads(KINDS.read_text())
    have = {p.name for p in data.glob("*.pdf")}
    return [
        {
            "id": f"kinds-{i}",
            "question": q["question"],
            "pages": sorted((Path(q["file"]).stem, p) for p in q["pages"]),
            "split": spec["documents"][q["file"]]["split"],
        }
        for i, q in enumerate(spec["questions"])
        if q["file"] in have
    ]


def collect(idx, qs: list[dict], pool: int) -> dict:
    """Everything the methods rank from, per question id: each retriever's top ``pool`` chunks
    (raw scores), each chunk's ``(file, first page, last page)`` and document row, the card
    scores of every document, and the page rankings that need the index (page-level BM25, its
    TMM with vector pages, relevant segments, and ``Index.search`` online with the defaults)."""
    from quality import _Positions  # bench/ is on sys.path: these scripts run as python bench/<name>.py

    from quarry.retrieval.bm25 import query_tokens
    from quarry.search.fusion import fuse
    from quarry.search.segments import relevant_segments

    index = idx.snapshot.index
    position = _Positions(index.cards)
    keys, texts = page_units(idx)
    pages = PageBM25(texts)

    def name_of(path: str) -> str:
        return Path(path).stem

    out = {}
    # no idx.prime_queries: each question is embedded alone, as `quarry search` embeds it
    # (onnx-int8 quantises a batch's activations together, so a padded batch moves cosines
    # enough to change a question's page here and there)
    for q in qs:
        lists, where, doc = {}, {}, {}
        for mode in ("vector", "bm25"):
            hits = idx.search(q["question"], k=pool, mode=mode).results
            lists[mode] = [(h.chunk_id, h.scores[mode]) for h in hits]
            where.update((h.chunk_id, (name_of(h.path), h.page_start, h.page_end)) for h in hits)
            doc.update((h.chunk_id, position[h.doc_id]) for h in hits)
        cards = [float(x) for x in index.cards.doc_scores(query_tokens(q["question"]))]
        page_hits = [((name_of(keys[i][0]), keys[i][1]), s) for i, s in pages.search(q["question"], pool)]
        vector_pages: dict = {}
        for c, s in lists["vector"]:
            path, first, last = where[c]
            for page in range(first or 0, (last or first or 0) + 1):
                vector_pages.setdefault((path, page), s)
        segs = relevant_segments(idx, q["question"], "balanced")
        online = idx.search(q["question"], k=pool // 5).results  # fuses max(50, 5k) = pool per retriever
        out[q["id"]] = {
            "lists": lists,
            "where": [[c, *w] for c, w in where.items()],
            "doc": [[c, d] for c, d in doc.items()],
            "cards": cards,
            "page-bm25": [list(p) for p, _ in page_hits],
            "tmm+page-bm25": [
                list(p) for p, _ in fuse({"vector": list(vector_pages.items()), "bm25": page_hits}, depth=pool)
            ],
            "segments": pages_of([(s.path, s.page_start, s.page_end) for s in segs], name_of),
            "hybrid (library default, online)": pages_of([(h.path, h.page_start, h.page_end) for h in online], name_of),
        }
    return out


def rank(c: dict, method: str, pool: int, **kw) -> list[tuple[str, int]]:
    """The page ranking of ``method`` from one question's collected candidates ``c``."""
    from consensus import with_consensus

    from quarry.search import fusion

    if method not in OFFLINE:
        return [tuple(p) for p in c[method]]
    where = {row[0]: row[1:] for row in c["where"]}
    lists = {m: [tuple(x) for x in items] for m, items in c["lists"].items()}
    if method in ("bm25", "vector"):
        ranked = lists[method]
    elif method in ("rrf", "tmm"):
        ranked = fusion.fuse(lists, method, depth=pool)
    else:
        doc = {row[0]: row[1] for row in c["doc"]}
        ranked = fusion.fuse(lists, "tmm", depth=pool)
        ranked = with_consensus(ranked, lists, doc, kw.get("consensus", 0.0), depth=pool)
        ranked = fusion.with_documents(ranked, doc, c["cards"], kw.get("documents", fusion.DOC_WEIGHT))
    return pages_of([where[i] for i, _ in ranked], lambda name: name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="financebench", choices=["financebench", "tenk", "kinds"])
    ap.add_argument(
        "--data",
        default=None,
        help="financebench: a folder holding data/ and pdfs/ "
        "(default $QUARRY_FINANCEBENCH); kinds: a folder of the PDFs bench/data/longpdf-kinds.json "
        "names (default $QUARRY_LONGPDF_KINDS)",
    )
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--pool", type=int, default=250, help="chunks per retriever (Index.search(k=50) fuses 250)")
    ap.add_argument(
        "--store", default=None, help="the index to use or build (default bench/results/stores/<set>-<backend>)"
    )
    ap.add_argument("--fresh", action="store_true", help="read the candidates again rather than from the cache")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {"financebench": "QUARRY_FINANCEBENCH", "tenk": "QUARRY_FINANCEBENCH", "kinds": "QUARRY_LONGPDF_KINDS"}[
        args.set
    ]
    data = Path(args.data or os.environ.get(env) or ROOT.parent / "data-ext" / args.set)
    only = TENK_FILINGS if args.set == "tenk" else None
    if args.set in ("financebench", "tenk"):
        ok = (data / "data" / "financebench_open_source.jsonl").exists() and list((data / "pdfs").glob("*.pdf"))
        pdfs = data / "pdfs"
        if only is not None:
            missing = [f for f in only if not (pdfs / f"{f}.pdf").exists()]
            ok = ok and not missing
            if missing:
                print(f"--set tenk needs these FinanceBench filings in {pdfs}: {', '.join(missing)}", file=sys.stderr)
    else:
        ok = bool(list(data.glob("*.pdf")))
        pdfs = data
    if not ok:
        print(
            f"skipping: no {args.set} PDFs at {data} (see this script's docstring for how to get them)", file=sys.stderr
        )
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["QUARRY_EMBED_BACKEND"] = args.backend

    from quarry.flows.orchestration import prefect_api, prefect_environment

    import quarry
    from quarry.search import fusion

    qs = kinds_questions(data) if args.set == "kinds" else questions(data, only)
    store = Path(args.store) if args.store else STORES / f"{args.set}-{args.backend}"
    if not (store / "CURRENT").exists():
        prefect_environment()
        with prefect_api(STORES / "logs"):
            from quarry.flows.index import index_flow

            # the PDFs carry a text layer: no OCR; parsed in this process (a 250-page filing takes
            # minutes on a busy 2-core machine, past the default per-file timeout); only the PDFs
            # (notes or question files kept beside them would otherwise be indexed as documents)
            index_flow(
                [str(pdfs)],
                db=str(store),
                overrides={
                    "embed_backend": args.backend,
                    "ocr": False,
                    "parse_workers": 1,
                    "parse_timeout": 3600,
                    "include": tuple(f"{f}.pdf" for f in only) if only else ("*.pdf",),
                },
            )
    t = time.perf_counter()
    cache = ROOT / "bench" / "results" / f"longpdf-{args.set}-candidates.json"
    with quarry.open(store) as idx:
        # the commit, not only its number: a store deleted and built again starts at generation 1 too
        generation = [idx.snapshot.pointer.generation, idx.snapshot.pointer.committed_at]
        n_pages = idx.snapshot.con.execute(
            "SELECT count(*) FROM (SELECT DISTINCT doc_id, page_start FROM chunks WHERE page_start IS NOT NULL)"
        ).fetchone()[0]
        cached = json.loads(cache.read_text()) if cache.exists() and not args.fresh else {}
        if (
            cached.get("store") == str(store.resolve())
            and cached.get("generation") == generation
            and cached.get("pool") == args.pool
            and set(cached["questions"]) >= {q["id"] for q in qs}
        ):
            cand = cached["questions"]
        else:
            cand = collect(idx, qs, args.pool)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(
                json.dumps(
                    {"store": str(store.resolve()), "generation": generation, "pool": args.pool, "questions": cand}
                )
            )
    per: dict[tuple[str, str], list[dict]] = {}
    grid: dict[tuple[str, float, float], list[dict]] = {}
    for q in qs:
        c = cand[q["id"]]
        for m in METHODS:
            per.setdefault((q["split"], m), []).append(metrics(rank(c, m, args.pool), q["pages"]))
        for cw in CONSENSUS_WEIGHTS:
            for dw in DOC_WEIGHTS:
                ranked = rank(c, "grid", args.pool, consensus=cw, documents=dw)
                grid.setdefault((q["split"], cw, dw), []).append(metrics(ranked, q["pages"]))

    def mean(items: list[dict]) -> dict:
        return {key: round(sum(x[key] for x in items) / len(items), 4) for key in KEYS}

    rows = [
        {"split": split, "method": m, "questions": len(per[(split, m)]), **mean(per[(split, m)])}
        for split in ("train", "test")
        for m in METHODS
        if (split, m) in per
    ]
    doc_grid = [
        {"split": split, "consensus": cw, "documents": dw, **mean(items)}
        for (split, cw, dw), items in sorted(grid.items())
    ]
    files = sorted({p.stem for p in pdfs.glob("*.pdf")} & set(only or [p.stem for p in pdfs.glob("*.pdf")]))
    payload = {
        "set": args.set,
        "data": str(data),
        "questions": len(qs),
        "files": len(files),
        "pages": n_pages,
        "backend": args.backend,
        "pool": args.pool,
        "documents_weight": fusion.DOC_WEIGHT,
        "seconds": round(time.perf_counter() - t),
        "grid": doc_grid,
        "results": rows,
    }
    dest = ROOT / "bench" / "results" / f"longpdf-{args.set}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(payload, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(f"python bench/longpdf.py --set {args.set} --data {data}", file=out)
    print(
        f"{args.set}: {len(qs)} questions, {len(files)} PDFs, {n_pages} pages; default: tmm + document "
        f"evidence {fusion.DOC_WEIGHT}",
        file=out,
    )
    print("grid (consensus weight x document evidence weight): page R@10 / doc R@10 / page nDCG@10", file=out)
    for g in doc_grid:
        print(
            f"  {g['split']:<5} c={g['consensus']:<5} w={g['documents']:<5} {g['page R@10']:.4f} / "
            f"{g['doc R@10']:.4f} / {g['nDCG@10']:.4f}",
            file=out,
        )
    print(f"{'split':<5} {'method':<34} {'n':>3} " + " ".join(f"{k:>10}" for k in KEYS), file=out)
    for r in rows:
        print(
            f"{r['split']:<5} {r['method']:<34} {r['questions']:>3} " + " ".join(f"{r[k]:>10.4f}" for k in KEYS),
            file=out,
        )
    if args.json:
        print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
