"""What leaving markup out of the embedded text saves, and what it costs in retrieval.

    python bench/markup.py [--tree DIR] [-n 400] [--json]

quarry embeds each chunk without the markup that says little of what it is about: Markdown link
and image targets, table delimiter rows, inline HTML tags, the marks of Markdown's syntax (heading
#s, bullets, emphasis, backticks; ``quarry.core.models.without_markup``); the stored and BM25 text keep all of it. This indexes one
tree four times through the real flow, into ``bench/results/stores/markup-{kept,links,out,heading-once}``:

- ``kept``: header and text embedded as they are (the plain join);
- ``links``: link targets, delimiter rows and HTML tags left out, syntax marks kept (quarry's
  default before the syntax marks went);
- ``out``: as quarry ships;
- ``heading-once``: as ``out``, and a chunk that opens with its section's heading leaves that
  line out, since the header's ``Section:`` path has just said it (an experiment, not shipped:
  the heading said twice finds more heading questions).

``kept``, ``links`` and ``heading-once`` patch the join into this process (Markdown parses in it). Per store:
chunks, tokens embedded, wall time of the index run. Then a ``known-item`` and a ``headings`` set
(-n questions, seed 0) drawn from the ``kept`` store are scored on each, vector and hybrid, at
document level (the chunks differ between the stores: the token limit splits fewer of them once
the markup is gone). Default tree: ../shared/data/trees/sourcegraph-handbook.

Last, what merging small sections would save (:func:`merged_sections`, counted on the ``out``
store's chunks). Prints the tables and writes bench/results/markup.json.
"""

from __future__ import annotations

import argparse
import re
import shutil
import time

from common import RESULTS, SHARED, load_avg, log, machine, table, write_json

STORES = RESULTS / "stores"


VARIANTS = ("kept", "links", "out", "heading-once")


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


def heading_once_join(header: str, text: str) -> str:
    """quarry's join, without the chunk's first line when that line is the last heading of the
    header's ``Section:`` path (case and spacing aside; a Setext underline after it goes too; a
    chunk that is its heading alone keeps it)."""
    from quarry.core.models import join_header

    joined = join_header(header, text)
    if not header:
        return joined
    head, _, body = joined.partition("\n\n")
    at = head.find("Section: ")
    if at < 0 or (at > 0 and head[at - 1] != "\n"):
        return joined
    leaf = " ".join(head[at + 9 :].split("\n", 1)[0].rsplit(" > ", 1)[-1].split()).casefold()
    line, _, rest = body.lstrip().partition("\n")
    if not leaf or " ".join(line.split()).casefold() != leaf:
        return joined
    underline = re.match(r"[ \t]*(?:=+|-+)[ \t]*(?:\n|$)", rest)
    rest = rest[underline.end() :].lstrip() if underline else rest.lstrip()
    return f"{head}\n\n{rest}" if rest else joined


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


def merged_sections(which: str = "out", chunk_size: int = 800) -> list[dict]:
    """What merging small sections would save, counted on a store's chunks: neighbouring
    one-chunk sections of one document, each under ``small`` characters and together within
    ``chunk_size``, greedily joined; each joined chunk saves its header and [CLS]/[SEP]."""
    import quarry
    from quarry.core.models import without_markup
    from quarry.ingest.embedders.minilm import bundled_model_path, load_tokenizer

    tokenizer = load_tokenizer(bundled_model_path(), None)
    with quarry.open(STORES / f"markup-{which}") as idx:
        rows = idx.snapshot.con.execute(
            "SELECT doc_id, start_char, end_char, header, n_tokens,"
            " count(*) OVER (PARTITION BY doc_id, section_index) AS in_section"
            " FROM chunks ORDER BY doc_id, chunk_index"
        ).fetchall()
    total = sum(r[4] for r in rows)
    out = []
    for small in (200, 400):
        merges = saved = 0
        i = 0
        while i < len(rows):
            if rows[i][5] != 1:
                i += 1
                continue
            start, j = rows[i][1], i + 1
            while (
                j < len(rows)
                and rows[j][0] == rows[i][0]
                and rows[j][5] == 1
                and rows[j - 1][2] - rows[j - 1][1] < small
                and rows[j][2] - rows[j][1] < small
                and rows[j][2] - start <= chunk_size
            ):
                saved += len(tokenizer.encode(without_markup(rows[j][3])).ids)  # header + [CLS]/[SEP]
                merges += 1
                j += 1
            i = j
        out.append({"small_chars": small, "headers_saved": merges, "tokens_saved": saved, "share": saved / total})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(SHARED / "trees" / "sourcegraph-handbook"))
    ap.add_argument("-n", type=int, default=400, help="Questions per generated set.")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from quarry.flows.orchestration import prefect_api

    out = {"tree": args.tree, "machine": machine(), "stores": [], "scores": []}
    with prefect_api(RESULTS / "markup-logs"):
        for which, join in (
            ("out", None),
            ("heading-once", heading_once_join),
            ("links", links_join),
            ("kept", plain_join),
        ):
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
    out["merged_sections"] = merged_sections()
    for m in out["merged_sections"]:
        print(
            f"small sections merged (each < {m['small_chars']} chars): {m['headers_saved']} headers,"
            f" {m['tokens_saved']} tokens ({m['share']:.1%}) saved"
        )
    write_json(RESULTS / "markup.json", out)
    if args.json:
        import json

        print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
