"""What leaving markup out of the embedded text saves, and what it costs in retrieval.

    python bench/markup.py [--tree DIR] [-n 400] [--json]

quarry embeds each chunk without the markup that says little of what it is about: Markdown link
and image targets, table delimiter rows, inline HTML tags, the marks of Markdown's syntax (heading
#s, bullets, emphasis, backticks; ``quarry.core.models.without_markup``), and without the section
heading its header has just said (``without_leading_heading``); the stored and BM25 text keep all
of it. This indexes one tree four times through the real flow, into
``bench/results/stores/markup-{kept,links,marks,out}``:

- ``kept``: header and text embedded as they are (the plain join);
- ``links``: link targets, delimiter rows and HTML tags left out, syntax marks kept (quarry's
  default before the syntax marks went);
- ``marks``: all the markup left out, the section's heading embedded twice (quarry's default
  before the repeated heading went);
- ``out``: as quarry ships.

``kept``, ``links`` and ``marks`` patch the join into this process (Markdown parses in it). Per store:
chunks, tokens embedded, wall time of the index run. Then a ``known-item`` and a ``headings`` set
(-n questions, seed 0) drawn from the ``kept`` store are scored on each, vector and hybrid, at
document level (the chunks differ between the stores: the token limit splits fewer of them once
the markup is gone). Default tree: ../shared/data/trees/sourcegraph-handbook.

Prints a table and writes bench/results/markup.json.
"""

from __future__ import annotations

import argparse
import shutil
import time

from common import RESULTS, SHARED, load_avg, log, machine, table, write_json

STORES = RESULTS / "stores"


VARIANTS = ("kept", "links", "marks", "out")


def plain_join(header: str, text: str) -> str:
    return f"{header}\n\n{text}" if header else text


def links_join(header: str, text: str) -> str:
    """The join before the syntax marks went: links, delimiter rows, HTML tags out."""
    from quarry.core import models

    def strip(t: str) -> str:
        if "](" in t:
            t = models._LINK.sub(lambda m: m.group(2) if models._TARGET.search(m.group(3)) else m.group(0), t)
        if "---" in t:
            t = models._DELIMITER_ROW.sub("", t)
        return models._HTML_TAG.sub(" ", t) if "<" in t else t

    return f"{strip(header)}\n\n{strip(text)}" if header else strip(text)


def marks_join(header: str, text: str) -> str:
    """The join before the repeated section heading went: every kind of markup out."""
    from quarry.core.models import without_markup

    return f"{without_markup(header)}\n\n{without_markup(text)}" if header else without_markup(text)


def use_join(join) -> None:
    """Embed with ``join`` from here on, in every module that imported quarry's."""
    import quarry.core.models as models
    import quarry.ingest.chunking as chunking
    import quarry.ingest.process as process
    import quarry.retrieval.corpus.boilerplate as boilerplate

    for module in (models, chunking, process, boilerplate):
        module.join_header = join


def index(tree: str, which: str) -> dict:
    from quarry.flows.index import index_flow

    import quarry

    db = STORES / f"markup-{which}"
    shutil.rmtree(db, ignore_errors=True)
    load = load_avg()
    started = time.perf_counter()
    index_flow([tree], db=str(db))
    wall = time.perf_counter() - started
    with quarry.open(db) as idx:
        chunks, tokens = idx.snapshot.con.execute("SELECT count(*), sum(n_tokens) FROM chunks").fetchone()
        documents = idx.status()["documents"]
    return {
        "store": which,
        "documents": documents,
        "chunks": chunks,
        "tokens": int(tokens),
        "wall_s": round(wall, 1),
        "load": load,
    }


def score(n: int) -> list[dict]:
    import quarry
    from quarry.eval.questions import generate
    from quarry.eval.scoring import score_set

    with quarry.open(STORES / "markup-kept") as idx:
        sets = {method: generate(idx, n, method, seed=0)[1] for method in ("known-item", "headings")}
    rows = []
    for which in VARIANTS:
        with quarry.open(STORES / f"markup-{which}") as idx:
            for method, questions in sets.items():
                for mode in ("vector", "hybrid"):
                    metrics = score_set(idx, questions, (mode,), 10)[mode]["metrics"]
                    rows.append(
                        {
                            "store": which,
                            "method": method,
                            "mode": mode,
                            "questions": len(questions),
                            "recall@10": metrics["recall@10"],
                            "mrr@10": metrics["mrr@10"],
                        }
                    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(SHARED / "trees" / "sourcegraph-handbook"))
    ap.add_argument("-n", type=int, default=400, help="Questions per generated set.")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from quarry.flows.orchestration import prefect_api

    out = {"tree": args.tree, "machine": machine(), "stores": [], "scores": []}
    with prefect_api(RESULTS / "markup-logs"):
        for which, join in (("out", None), ("marks", marks_join), ("links", links_join), ("kept", plain_join)):
            if join is not None:
                use_join(join)  # from here on, this process embeds with it
            out["stores"].append(index(args.tree, which))
            log(out["stores"][-1])
    out["scores"] = score(args.n)
    stores = {s["store"]: s for s in out["stores"]}
    print(
        table(
            ["store", "documents", "chunks", "tokens embedded", "index wall s", "load"],
            [
                [s["store"], s["documents"], s["chunks"], s["tokens"], s["wall_s"], s["load"]]
                for s in (stores[v] for v in VARIANTS)
            ],
        )
    )
    for v in VARIANTS[1:]:
        print(f"tokens: {v} embeds {1 - stores[v]['tokens'] / stores['kept']['tokens']:.1%} fewer than kept")
    by = {(r["store"], r["method"], r["mode"]): r for r in out["scores"]}
    print(
        table(
            ["method", "mode", "questions", *(f"R@10 {v}" for v in VARIANTS), *(f"MRR@10 {v}" for v in VARIANTS)],
            [
                [
                    method,
                    mode,
                    by[("kept", method, mode)]["questions"],
                    *(f"{by[(v, method, mode)]['recall@10']:.3f}" for v in VARIANTS),
                    *(f"{by[(v, method, mode)]['mrr@10']:.3f}" for v in VARIANTS),
                ]
                for method in ("known-item", "headings")
                for mode in ("vector", "hybrid")
            ],
        )
    )
    write_json(RESULTS / "markup.json", out)
    if args.json:
        import json

        print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
