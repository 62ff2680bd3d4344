"""What leaving markup out of the embedded text saves, and what it costs in retrieval.

    python bench/markup.py [--tree DIR] [-n 400] [--json]

quarry embeds each chunk without the markup that says little of what it is about: Markdown link
and image targets, table delimiter rows, inline HTML tags (``quarry.core.models.without_markup``);
the stored and BM25 text keep all of it. This indexes one tree twice through the real flow, into
``bench/results/stores/markup-{kept,out}``: ``kept`` with the markup embedded (the plain join of
header and text, patched into this process: Markdown parses in it), ``out`` as quarry ships. Per
store: chunks, tokens embedded, wall time of the index run. Then a ``known-item`` and a ``headings``
set (-n questions, seed 0) drawn from the ``kept`` store are scored on both, vector and hybrid,
at document level (the chunks differ between the stores: the token limit splits fewer of them
once the markup is gone). Default tree: ../shared/data/trees/sourcegraph-handbook.

Prints a table and writes bench/results/markup.json.
"""

from __future__ import annotations

import argparse
import shutil
import time

from common import RESULTS, SHARED, load_avg, log, machine, table, write_json

STORES = RESULTS / "stores"


def keep_markup() -> None:
    """Embed header + text as they are: the join before markup was left out, in every module that
    imported it."""
    import quarry.core.models as models
    import quarry.ingest.chunking as chunking
    import quarry.ingest.process as process
    import quarry.retrieval.corpus.boilerplate as boilerplate

    def join_header(header: str, text: str) -> str:
        return f"{header}\n\n{text}" if header else text

    for module in (models, chunking, process, boilerplate):
        module.join_header = join_header


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
    for which in ("kept", "out"):
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
        out["stores"].append(index(args.tree, "out"))
        log(out["stores"][-1])
        keep_markup()  # from here on, this process embeds the markup
        out["stores"].append(index(args.tree, "kept"))
        log(out["stores"][-1])
    out["scores"] = score(args.n)
    kept, left = out["stores"][1], out["stores"][0]
    print(
        table(
            ["store", "documents", "chunks", "tokens embedded", "index wall s", "load"],
            [[s["store"], s["documents"], s["chunks"], s["tokens"], s["wall_s"], s["load"]] for s in (kept, left)],
        )
    )
    print(f"tokens: {1 - left['tokens'] / kept['tokens']:.1%} fewer with the markup left out\n")
    print(
        table(
            ["method", "mode", "questions", "R@10 kept", "R@10 out", "MRR@10 kept", "MRR@10 out"],
            [
                [
                    k["method"],
                    k["mode"],
                    k["questions"],
                    f"{k['recall@10']:.3f}",
                    f"{o['recall@10']:.3f}",
                    f"{k['mrr@10']:.3f}",
                    f"{o['mrr@10']:.3f}",
                ]
                for k, o in zip(
                    [r for r in out["scores"] if r["store"] == "kept"],
                    [r for r in out["scores"] if r["store"] == "out"],
                    strict=True,
                )
            ],
        )
    )
    write_json(RESULTS / "markup.json", out)
    if args.json:
        import json

        print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
