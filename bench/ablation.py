"""Ablation of contextual headers and sectioners: nDCG@10 / recall@10 per configuration.

    python bench/ablation.py [--sets cranfield,scifact] [--long cranfield,scifact] [--backend onnx-int8]
                             [--split test] [--configs none,title,...] [--long-configs structure,semantic]
                             [--long-limit 2000] [--limit N [--scored-only]] [--json]

Two kinds of corpus:

- the BEIR sets as they are (one Markdown file per abstract, ``# title`` then the text):
  header configurations ``none`` / ``title`` / ``title+section`` (the default) /
  ``title+section+summary``, and the ``semantic`` sectioner. Abstracts are short (SciFact's
  longest is under ``max_section``), so the sectioner cannot matter there; the run shows it;
- ``<set>-long``: the same judged texts made into long documents without headings — the
  abstracts (``title. text``, one paragraph each) of a fixed random order, ``--per-file`` of
  them per ``.txt`` file, separated by blank lines. A retrieved chunk counts as the abstract
  that holds most of its characters, so the judgments stay the BEIR ones; what changes is
  whether chunks straddle two abstracts, which is what a sectioner decides. Every abstract
  judged in any split is included, plus random others up to ``--long-limit``.

Each set is indexed through the real flow into ``bench/results/stores/ablation-<set>-<backend>``;
configurations run one after another on that store, so texts that do not change between them
reuse their vectors.

The ``llm`` long configuration sections with an LLM: ``--llm-server`` starts llama-cpp-python's
OpenAI-compatible server with SmolLM2-135M-Instruct from ``.venv-llm`` (``make test-llm`` builds
it), or ``--llm-base-url``/``--llm-model`` name any endpoint. Its rows carry the LLM calls and
tokens spent, also per 1,000 chunks. ``llm-context`` keeps the structure sections and puts the
model's document summary and section summaries in the header; ``llm+context`` does both.
``--judged test`` builds the long corpora from the test judgments only (plus random others up to
``--long-limit``), which keeps an LLM run on 2 cores to tens of minutes; with ``--limit N
--scored-only`` they keep only the abstracts judged for the N queries scored (minutes).

``--llm-cost TREE`` instead indexes TREE with ``--sectioner llm --context llm`` (and the
optional section summaries / per-chunk context) against the scripted OpenAI-compatible server of
``tests/fakeopenai.py`` and reports LLM calls and tokens per 1,000 chunks (tokens counted as the
fake server does, one per four characters; a real tokenizer differs by some tens of percent).

Prints a table and writes ``bench/results/ablation.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from common import ROOT, SHARED, with_test_helpers

BEIR = SHARED / "beir"
STORES = ROOT / "bench" / "results" / "stores"
CHUNKS_PER_QUERY = 200
MODES = ("bm25", "vector", "hybrid")

CONFIGS = {
    "none": {"header_fields": ("none",)},
    "title": {"header_fields": ("title",)},
    "title+section": {},  # the default
    "title+section+summary": {"header_fields": ("title", "section", "summary")},
    "semantic": {"sectioner": "semantic"},
}
LONG_CONFIGS = {
    "structure": {},
    "semantic": {"sectioner": "semantic"},
    "structure+summary": {"header_fields": ("title", "section", "summary")},
    "semantic-p80": {"sectioner": "semantic", "semantic_percentile": 80},
    "semantic-p95": {"sectioner": "semantic", "semantic_percentile": 95},
    "llm": {"sectioner": "llm"},  # the endpoint is filled in by main()
    # The model's document summary and section summaries in the header (structure sections).
    "llm-context": {
        "context": "llm",
        "llm_section_summaries": True,
        "header_fields": ("title", "section", "summary", "section_summary"),
    },
    # Both: the model's sections, each with the model's summary.
    "llm+context": {
        "sectioner": "llm",
        "context": "llm",
        "llm_section_summaries": True,
        "header_fields": ("title", "section", "summary", "section_summary"),
    },
}
LLM_CONFIGS = ("llm", "llm-context", "llm+context")


def write_long_corpus(
    beir_dir: Path,
    dest: Path,
    per_file: int,
    limit: int,
    seed: int = 13,
    judged_splits: str = "*",
    only: set[str] | None = None,
) -> dict:
    """Write the long-document variant of a BEIR set; return ``{file name: [abstract ids]}``.

    ``only``: keep just these judged abstracts (those of the queries scored), plus unjudged others.
    """
    from quarry.eval.evaluation import _read_jsonl, _read_qrels

    corpus = {
        str(r["_id"]): (str(r.get("title") or ""), str(r.get("text") or ""))
        for _, r in _read_jsonl(beir_dir / "corpus.jsonl")
    }
    judged = set()
    for qrels in (beir_dir / "qrels").glob(f"{judged_splits}.tsv"):
        judged |= {d for rels in _read_qrels(qrels).values() for d in rels}
    rng = random.Random(seed)
    others = sorted(set(corpus) - judged)
    rng.shuffle(others)
    if only is not None:
        judged &= only
    chosen = sorted(judged & set(corpus)) + others[: max(0, limit - len(judged))]
    rng.shuffle(chosen)
    dest.mkdir(parents=True, exist_ok=True)
    layout = {}
    for n in range(0, len(chosen), per_file):
        ids = chosen[n : n + per_file]
        name = f"long-{n // per_file:05d}.txt"
        paragraphs = [" ".join(f"{corpus[i][0].rstrip('.')}. {corpus[i][1]}".split()) for i in ids]
        path = dest / name
        body = "\n\n".join(paragraphs) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != body:
            path.write_text(body, encoding="utf-8")
        layout[name] = ids
    return {"files": layout, "abstracts": len(chosen), "judged": len(judged & set(corpus))}


def abstract_spans(tree: Path, layout: dict) -> dict[str, list[tuple[int, int, str]]]:
    """Character spans of each abstract in the *parsed* text of each long file."""
    from quarry.ingest.parsers import parse_file

    out = {}
    for name, _ids in layout["files"].items():
        path = tree / name
        text = parse_file(str(path)).text
        spans, pos = [], 0
        for doc_id, para in zip(_ids, text.split("\n\n")):
            start = text.index(para, pos)
            spans.append((start, start + len(para), doc_id))
            pos = start + len(para)
        out[str(path.resolve())] = spans
    return out


def owner(spans: list[tuple[int, int, str]], start: int, end: int) -> str | None:
    """The abstract holding most characters of ``[start, end)``."""
    best, best_overlap = None, 0
    for a, b, doc_id in spans:
        overlap = min(b, end) - max(a, start)
        if overlap > best_overlap:
            best, best_overlap = doc_id, overlap
    return best


def score(store: Path, queries: dict, qrels: dict, to_doc) -> dict:
    """Metrics per mode; ``to_doc(result)`` maps a hit to a judged document id."""
    import quarry
    from quarry.eval.evaluation import chunk_ranking_to_docs, evaluate

    out = {}
    with quarry.open(store) as idx:
        out["chunks"] = idx.status()["chunks"]
        idx.prime_queries([queries[q] for q in qrels])
        for mode in MODES:
            rankings = {}
            for q in qrels:
                hits = idx.search(queries[q], k=CHUNKS_PER_QUERY, mode=mode).results
                rankings[q] = chunk_ranking_to_docs([d for d in map(to_doc, hits) if d])
            out[mode] = evaluate(rankings, qrels)
    return out


def run_set(
    name: str,
    configs: dict,
    split: str,
    backend: str,
    index_flow,
    long: dict | None,
    limit: int | None,
) -> list[dict]:
    from quarry.eval.evaluation import load_beir, write_corpus_tree

    beir = load_beir(str(BEIR / name), split)
    qids = sorted(beir.queries)[:limit] if limit else sorted(beir.queries)
    label = f"{name}-long" if long else name
    if long and long["judged"] != "*":
        label += f"-{long['judged']}{long['limit']}"
    if long and long.get("scored_only") and limit:
        label += f"-q{limit}"
    store = STORES / f"ablation-{label}-{backend}"
    tree = STORES / f"ablation-{label}-corpus"
    if long:
        only = {d for q in qids for d in beir.qrels.get(q, {})} if long.get("scored_only") and limit else None
        layout = write_long_corpus(
            BEIR / name, tree, long["per_file"], long["limit"], judged_splits=long["judged"], only=only
        )
        spans = abstract_spans(tree, layout)
        to_doc = lambda r: owner(spans.get(r.path, []), r.start_char, r.end_char)  # noqa: E731
        info = {"files": len(layout["files"]), "abstracts": layout["abstracts"], "judged": layout["judged"]}
    else:
        mapping = write_corpus_tree(beir, str(tree))
        by_path = {str((tree / rel).resolve()): doc_id for rel, doc_id in mapping.items()}
        to_doc = lambda r: by_path.get(r.path)  # noqa: E731
        info = {"files": len(mapping)}
    qrels = {q: beir.qrels[q] for q in qids}
    results = []
    for config, overrides in configs.items():
        t = time.perf_counter()
        report = index_flow([str(tree)], db=str(store), overrides={**overrides, "embed_backend": backend})
        seconds = time.perf_counter() - t
        metrics = score(store, beir.queries, qrels, to_doc)
        shown = {k: v for k, v in overrides.items() if k not in ("llm_base_url", "llm_api_key")}
        row = {
            "set": label,
            "split": split,
            "queries": len(qids),
            "config": config,
            "overrides": shown,
            "backend": backend,
            "chunks": metrics.pop("chunks"),
            "embedded": report.get("embedded_chunks"),
            "index_seconds": round(seconds, 1),
            "modes": metrics,
            **info,
        }
        if config in LLM_CONFIGS:
            per = 1000 / max(1, report["chunks"])
            row.update(
                {k: report[k] for k in ("llm_calls", "llm_prompt_tokens", "llm_completion_tokens", "llm_cached")},
                llm_fallback_windows=len(report["llm_fallback_windows"]),
                llm_calls_per_1k_chunks=round(report["llm_calls"] * per, 1),
                llm_tokens_per_1k_chunks=round((report["llm_prompt_tokens"] + report["llm_completion_tokens"]) * per),
            )
        results.append(row)
        print(_line(row), flush=True)
    return results


def _line(row: dict) -> str:
    cells = " ".join(f"{row['modes'][m]['ndcg@10']:>7.4f} {row['modes'][m]['recall@10']:>7.4f}" for m in MODES)
    llm = (
        f"  llm {row['llm_calls']} calls ({row['llm_calls_per_1k_chunks']}/1k chunks), "
        f"{row['llm_tokens_per_1k_chunks']} tokens/1k chunks, {row['llm_fallback_windows']} fallback windows"
        if "llm_calls" in row
        else ""
    )
    return f"{row['set']:<15} {row['split']:<5} {row['config']:<22} {cells} {row['chunks'] or 0:>6}{llm}"


LLM_VARIANTS = {
    "sections+document": {},
    "+section summaries": {"llm_section_summaries": True},
    "+chunk context": {"llm_chunk_context": True},
}


def _plausible_answer(request: dict):
    """A section every 25 numbered lines, titled by the line; a title and summary otherwise."""
    import re

    rf = json.dumps(request.get("response_format") or {})
    prompt = request["messages"][-1]["content"]
    if "sections" in rf:
        lines = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.M)
        return {"sections": [{"title": " ".join(t.split()[:6]), "start_line": int(n)} for n, t in lines[::25]]}
    if request.get("response_format"):
        return {
            "title": "A descriptive title of the document",
            "summary": "One sentence that says what the "
            "document is about, in about twenty words, as a model would write it for a search index.",
        }
    return "This chunk is from the section of the document that explains the topic named in its heading."


def llm_cost(tree: Path, index_flow) -> list[dict]:
    """LLM calls and tokens per 1,000 chunks for each :data:`LLM_VARIANTS` entry, from an empty cache."""
    import tempfile

    with_test_helpers()
    from fakeopenai import FakeOpenAI

    rows = []
    with FakeOpenAI() as server:
        server.chat_handler = _plausible_answer
        for name, extra in LLM_VARIANTS.items():
            store = Path(tempfile.mkdtemp(prefix="quarry-llm-cost-")) / "db"
            overrides = {
                "sectioner": "llm",
                "context": "llm",
                "llm_base_url": server.base_url,
                "llm_model": "m",
                "embed_backend": "hash",
                **extra,
            }
            t = time.perf_counter()
            report = index_flow([str(tree)], db=str(store), overrides=overrides)
            per = 1000 / max(1, report["chunks"])
            row = {
                "tree": str(tree),
                "variant": name,
                "files": report["added"],
                "chunks": report["chunks"],
                "llm_calls": report["llm_calls"],
                "llm_prompt_tokens": report["llm_prompt_tokens"],
                "llm_completion_tokens": report["llm_completion_tokens"],
                "calls_per_1k_chunks": round(report["llm_calls"] * per, 1),
                "prompt_tokens_per_1k_chunks": round(report["llm_prompt_tokens"] * per),
                "completion_tokens_per_1k_chunks": round(report["llm_completion_tokens"] * per),
                "seconds": round(time.perf_counter() - t, 1),
            }
            rerun = index_flow([str(tree)], db=str(store), full=True, overrides=overrides)
            row["calls_on_full_reindex"] = rerun["llm_calls"]
            rows.append(row)
            print(
                f"{name:<20} {row['files']:>6} {row['chunks']:>7} {row['llm_calls']:>7} "
                f"{row['calls_per_1k_chunks']:>9} {row['prompt_tokens_per_1k_chunks']:>11} "
                f"{row['completion_tokens_per_1k_chunks']:>9} {row['calls_on_full_reindex']:>7}",
                flush=True,
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="cranfield,scifact", help="BEIR sets as they are ('' for none)")
    ap.add_argument("--long", default="cranfield,scifact", help="sets to also build as long documents ('' for none)")
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--split", default="test", help="judgments to score; tune on train, report test")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--long-configs", default="structure,semantic,structure+summary")
    ap.add_argument("--per-file", type=int, default=8, help="abstracts per long document")
    ap.add_argument("--long-limit", type=int, default=2000, help="abstracts in a long corpus (judged ones always)")
    ap.add_argument("--limit", type=int, default=None, help="score only the first N queries (quick checks)")
    ap.add_argument(
        "--llm-cost",
        default=None,
        metavar="TREE",
        help="measure LLM calls/tokens per 1,000 chunks on TREE against the fake server, then stop",
    )
    ap.add_argument("--judged", default="*", help="qrels splits whose documents the long corpora keep ('test')")
    ap.add_argument(
        "--scored-only",
        action="store_true",
        help="with --limit: long corpora keep only the judged abstracts of the scored queries",
    )
    ap.add_argument(
        "--llm-server",
        action="store_true",
        help="start llama-cpp-python's server with SmolLM2-135M (.venv-llm) for the llm config",
    )
    ap.add_argument("--llm-base-url", default="", help="an OpenAI-compatible endpoint for the llm config")
    ap.add_argument("--llm-model", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["QUARRY_EMBED_BACKEND"] = args.backend  # the query side embeds with the same model

    from quarry.flows.orchestration import prefect_api, prefect_environment

    prefect_environment()
    if args.llm_cost:
        print(
            f"{'variant':<20} {'files':>6} {'chunks':>7} {'calls':>7} {'calls/1k':>9} {'prompt/1k':>11} "
            f"{'compl/1k':>9} {'re-run':>7}"
        )
        with prefect_api(STORES / "logs"):
            from quarry.flows.index import index_flow

            rows = llm_cost(Path(args.llm_cost), index_flow)
        dest = ROOT / "bench" / "results" / "llm_cost.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps({"results": rows}, indent=2))
        return
    header = " ".join(f"{m + ' nDCG':>12} {'R@10':>3}" for m in MODES)
    table = sys.stderr if args.json else sys.stdout
    print(f"{'set':<15} {'split':<5} {'config':<22} {header} {'chunks':>6}", file=table)
    results = []
    server = None
    if set(LLM_CONFIGS) & set(args.long_configs.split(",")):
        if args.llm_server:
            with_test_helpers()
            import tempfile

            from llamaserver import MODEL_ALIAS, LlamaServer, find_model, server_python

            python = server_python()
            log = Path(tempfile.mkdtemp(prefix="quarry-llama-")) / "server.log"
            server = LlamaServer(python, find_model(python), log).start()
            args.llm_base_url, args.llm_model = server.base_url, MODEL_ALIAS
        if not args.llm_base_url and not os.environ.get("QUARRY_LLM_BASE_URL"):
            ap.error("the llm config needs --llm-server, --llm-base-url or QUARRY_LLM_BASE_URL")
        for name in LLM_CONFIGS:
            LONG_CONFIGS[name] = {
                **LONG_CONFIGS[name],
                "llm_concurrency": 2,
                **({"llm_base_url": args.llm_base_url} if args.llm_base_url else {}),
                **({"llm_model": args.llm_model} if args.llm_model else {}),
            }
    try:
        results = _run(args, results)
    finally:
        if server is not None:
            server.stop()
    dest = ROOT / "bench" / "results" / "ablation.json"
    previous = json.loads(dest.read_text()) if dest.exists() else {"results": []}
    fresh = {(r["set"], r["split"], r["config"], r["backend"]) for r in results}
    kept = [r for r in previous.get("results", []) if (r["set"], r["split"], r["config"], r["backend"]) not in fresh]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"results": kept + results}, indent=2))
    if args.json:
        print(json.dumps({"results": results}, indent=2))


def _run(args, results: list[dict]) -> list[dict]:
    from quarry.flows.orchestration import prefect_api

    with prefect_api(STORES / "logs"):
        from quarry.flows.index import index_flow

        for name in filter(None, args.sets.split(",")):
            configs = {c: CONFIGS[c] for c in args.configs.split(",")}
            results += run_set(name, configs, args.split, args.backend, index_flow, None, args.limit)
        for name in filter(None, args.long.split(",")):
            configs = {c: LONG_CONFIGS[c] for c in args.long_configs.split(",")}
            results += run_set(
                name,
                configs,
                args.split,
                args.backend,
                index_flow,
                {
                    "per_file": args.per_file,
                    "limit": args.long_limit,
                    "judged": args.judged,
                    "scored_only": args.scored_only,
                },
                args.limit,
            )
    return results


if __name__ == "__main__":
    main()
