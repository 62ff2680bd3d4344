"""Long PDFs answered at the right page: page recall@10 and nDCG@10 per retrieval mode.

    python bench/longpdf.py [--data DIR] [--backend onnx-int8] [--pool 250] [--store DIR] [--json]

The set: FinanceBench (Islam et al., 2023; the patronus-ai/financebench repository on GitHub, CC-BY-NC-4.0), whose
open-source questions about public companies' SEC filings each name the filing and the page(s)
holding the evidence, as judged by the benchmark's annotators (``evidence_page_num``, 0-based;
here 1-based). quarry does not ship it. To get it, clone that repository outside the project
and point ``--data`` (or ``$QUARRY_FINANCEBENCH``) at a folder holding its ``data/`` and a
``pdfs/`` folder with the filings to index (any subset: questions whose evidence filing is
absent are left out). The run this README reports used 11 10-K filings (1,733 pages) of five
companies, two or three years each, so that filings of one company compete: 3M 2018/2022, Adobe
2017/2022, Boeing 2018/2022, Corning 2020/2021/2022 and General Mills 2019/2020 (23 questions;
a small set, what parsing and embedding could do in the time on a busy 2-core machine: read
its numbers as indicative, not as a benchmark result).
Without the folder the bench says so and stops.

The PDFs are indexed once through the real flow (default settings) into
``bench/results/stores/financebench-<backend>`` and kept. Each question's vector and BM25
candidates (top ``--pool`` chunks, raw scores) are read once; every method ranks pages
(``(file, page)``), a chunk standing for each page it spans, a page keeping its best place:

- ``bm25``, ``vector``: one retriever's chunks; ``rrf``, ``tmm`` (the library default): fused
  chunks (:func:`quarry.search.fusion.fuse`);
- ``page-bm25``: Okapi BM25 over whole pages (the page's chunk texts joined, each under its
  filing's header), quarry's tokens, stemmer and weights;
- ``tmm+page-bm25``: that page ranking fused by TMM with the page ranking of the vector
  retriever (a page scored by its best chunk's cosine);
- ``segments``: the pages the relevant segments (``--segments balanced``) cover, in order.

Nothing is tuned on these questions: every method runs at the library's defaults. Prints a
table and writes bench/results/longpdf.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STORES = ROOT / "bench" / "results" / "stores"
K = 10


def questions(data: Path) -> list[dict]:
    """FinanceBench questions whose evidence filings are all among ``data/pdfs``."""
    have = {p.stem for p in (data / "pdfs").glob("*.pdf")}
    out = []
    for line in (data / "data" / "financebench_open_source.jsonl").read_text().splitlines():
        q = json.loads(line)
        pages = {(e["doc_name"], int(e["evidence_page_num"]) + 1) for e in q["evidence"]}
        if pages and all(doc in have for doc, _ in pages):
            out.append({"id": q["financebench_id"], "question": q["question"], "pages": sorted(pages)})
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
    rel = set(relevant)
    top = ranked[:K]
    dcg = sum(1 / math.log2(i + 2) for i, p in enumerate(top) if p in rel)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(rel), K)))
    return {"recall@10": len(rel & set(top)) / len(rel), "ndcg@10": dcg / ideal,
            "hit@10": float(bool(rel & set(top)))}


class PageBM25:
    """Okapi BM25 over whole pages, with quarry's tokens, stop words, stemmer and weights."""

    def __init__(self, units: list[str]):
        import numpy as np

        from quarry.index.bm25 import bm25_weights, stem_words
        from quarry.index.stopwords import STOPWORDS
        from quarry.index.textnorm import tokens

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
        "WHERE c.page_start IS NOT NULL ORDER BY d.path, c.chunk_index").fetchall()
    pages: dict[tuple[str, int], list[str]] = {}
    for path, page, header, text in rows:
        parts = pages.setdefault((path, page), [header.split("\n")[0]] if header else [])
        parts.append(text)
    keys = list(pages)
    return keys, ["\n".join(pages[k]) for k in keys]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("QUARRY_FINANCEBENCH", str(ROOT.parent / "data-ext" / "financebench")))
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--pool", type=int, default=250, help="chunks per retriever (Index.search(k=50) fuses 250)")
    ap.add_argument("--store", default=None, help="the index to use or build (default bench/results/stores/"
                    "financebench-<backend>)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    data = Path(args.data)
    if not (data / "data" / "financebench_open_source.jsonl").exists() or not list((data / "pdfs").glob("*.pdf")):
        print(f"skipping: no FinanceBench at {data} (needs data/financebench_open_source.jsonl and pdfs/*.pdf; "
              "see this script's docstring for how to get it)", file=sys.stderr)
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["QUARRY_EMBED_BACKEND"] = args.backend

    import quarry
    from quarry.cli.orchestration import prefect_api, prefect_environment
    from quarry.search.fusion import fuse
    from quarry.search.segments import relevant_segments

    qs = questions(data)
    store = Path(args.store) if args.store else STORES / f"financebench-{args.backend}"
    if not (store / "CURRENT").exists():
        prefect_environment()
        with prefect_api(STORES / "logs"):
            from quarry.flows.index import index_flow

            # filings carry a text layer: no OCR; parsed in this process (a 250-page filing takes
            # minutes on a busy 2-core machine, past the default per-file timeout)
            index_flow([str(data / "pdfs")], db=str(store), overrides={
                "embed_backend": args.backend, "ocr": False, "parse_workers": 1, "parse_timeout": 3600})
    name_of = lambda path: Path(path).stem  # noqa: E731
    methods = ["bm25", "vector", "rrf", "tmm", "page-bm25", "tmm+page-bm25", "segments"]
    per: dict[str, list[dict]] = {m: [] for m in methods}
    t = time.perf_counter()
    with quarry.open(store) as idx:
        keys, texts = page_units(idx)
        pages = PageBM25(texts)
        idx.prime_queries([q["question"] for q in qs])
        for q in qs:
            lists, where = {}, {}
            for mode in ("vector", "bm25"):
                hits = idx.search(q["question"], k=args.pool, mode=mode).results
                lists[mode] = [(h.chunk_id, h.scores[mode]) for h in hits]
                where.update((h.chunk_id, (h.path, h.page_start, h.page_end)) for h in hits)
            rank = {m: pages_of([where[c] for c, _ in lists[m]], name_of) for m in ("bm25", "vector")}
            for m in ("rrf", "tmm"):
                rank[m] = pages_of([where[c] for c, _ in fuse(lists, m, depth=args.pool)], name_of)
            page_hits = [((name_of(keys[i][0]), keys[i][1]), s) for i, s in pages.search(q["question"], args.pool)]
            rank["page-bm25"] = [p for p, _ in page_hits]
            vector_pages: dict = {}
            for c, s in lists["vector"]:
                path, first, last = where[c]
                for page in range(first or 0, (last or first or 0) + 1):
                    vector_pages.setdefault((name_of(path), page), s)
            rank["tmm+page-bm25"] = [p for p, _ in fuse({"vector": list(vector_pages.items()), "bm25": page_hits}, depth=args.pool)]
            segs = relevant_segments(idx, q["question"], "balanced")
            rank["segments"] = pages_of([(s.path, s.page_start, s.page_end) for s in segs], name_of)
            for m in methods:
                per[m].append(metrics(rank[m], q["pages"]))
    rows = []
    for m in methods:
        n = len(per[m])
        rows.append({"method": m, "questions": n, **{key: round(sum(x[key] for x in per[m]) / n, 4)
                                                     for key in ("recall@10", "ndcg@10", "hit@10")}})
    payload = {"data": str(data), "questions": len(qs), "filings": len(list((data / "pdfs").glob("*.pdf"))),
               "pages": len(keys), "backend": args.backend, "pool": args.pool, "seconds": round(time.perf_counter() - t),
               "results": rows}
    dest = ROOT / "bench" / "results" / "longpdf.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(payload, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(f"FinanceBench: {len(qs)} questions, {payload['filings']} filings, {len(keys)} pages", file=out)
    print(f"{'method':<16} {'page R@10':>9} {'nDCG@10':>8} {'hit@10':>7}", file=out)
    for r in rows:
        print(f"{r['method']:<16} {r['recall@10']:>9.4f} {r['ndcg@10']:>8.4f} {r['hit@10']:>7.4f}", file=out)
    if args.json:
        print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
