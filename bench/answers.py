"""Answers per question: retrieval and generation time, tokens, citations kept and dropped, sentences
without a citation, on SciFact's claims (../shared/data/beir/scifact) asked as questions.

    python bench/answers.py [--questions 40] [--docs 400] [--embed hash|onnx-int8] [--real] [--json]

A tree of ``--docs`` SciFact abstracts (those the questions' judgments name first, then others) is
indexed into a temporary store. Each question is asked through ``Index.answer``:

- by default against the fake OpenAI-compatible server of the tests (tests/fakeopenai.py), whose
  answer cites passages 1 and 2, one number never given, leaves one sentence uncited and quotes
  passage 1: the figures are the speed of quarry's machinery (retrieval, prompt, the HTTP round
  trip, checking), not of a model;
- with ``--real``, against the endpoint of ``QUARRY_LLM_BASE_URL`` / ``QUARRY_LLM_MODEL`` /
  ``QUARRY_LLM_API_KEY`` (or ``OPENAI_API_KEY``): what a real model cites and what it costs.

Prints a table and a summary (stderr with ``--json``) and writes bench/results/answers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

from common import ROOT, SHARED, with_test_helpers

with_test_helpers()
SCIFACT = SHARED / "beir" / "scifact"


def scripted(body: dict) -> str:
    """The fake model's answer: two cited sentences (one with an extra, invented number), a quote of
    passage 1, and a sentence with no citation."""
    prompt = "\n".join(str(m.get("content", "")) for m in body["messages"])
    passages = re.findall(r'<passage number="(\d+)"[^>]*>\n(.*?)\n</passage>', prompt, re.DOTALL)
    if not passages:
        return "NOT_FOUND"
    words = passages[0][1].split()
    quote = " ".join(words[2:10])
    last = passages[min(1, len(passages) - 1)][0]
    return (
        f'The first passage says "{quote}" [1]. A second source agrees [{last}][{len(passages) + 5}]. '
        "More research is needed."
    )


def build_tree(folder: Path, n_questions: int, n_docs: int) -> list[dict]:
    """Write the abstracts as Markdown files; returns the questions."""
    queries = {}
    for line in (SCIFACT / "queries.jsonl").open():
        q = json.loads(line)
        queries[q["_id"]] = q["text"]
    qrels: dict[str, list[str]] = {}
    for line in list((SCIFACT / "qrels" / "test.tsv").open())[1:]:
        qid, doc, _ = line.rstrip("\n").split("\t")
        qrels.setdefault(qid, []).append(doc)
    questions = [{"id": qid, "text": queries[qid], "relevant": docs} for qid, docs in list(qrels.items())[:n_questions]]
    wanted = list(dict.fromkeys(d for q in questions for d in q["relevant"]))
    corpus = {}
    for line in (SCIFACT / "corpus.jsonl").open():
        rec = json.loads(line)
        if rec["_id"] in wanted or len(corpus) < n_docs - len(wanted):
            corpus[rec["_id"]] = rec
        if len(corpus) >= n_docs and all(w in corpus for w in wanted):
            break
    folder.mkdir(parents=True, exist_ok=True)
    for rec in corpus.values():
        (folder / f"{rec['_id']}.md").write_text(f"# {rec['title']}\n\n{rec['text']}\n", encoding="utf-8")
    return questions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--embed", default="hash", help="embedding backend of the store (hash: fastest; onnx-int8: real)")
    ap.add_argument("--real", action="store_true", help="ask the endpoint of QUARRY_LLM_* instead of the fake model")
    ap.add_argument("--max-context-tokens", type=int, default=3000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not SCIFACT.exists():
        sys.exit(f"{SCIFACT} not found: the shared SciFact collection is needed")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["QUARRY_EMBED_BACKEND"] = args.embed
    os.environ.setdefault("QUARRY_DUCKDB_FTS", "0")
    out = sys.stderr if args.json else sys.stdout

    from quarry.flows.run import index

    import quarry
    from quarry.core.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="quarry-bench-answers-"))
    questions = build_tree(work / "tree", args.questions, args.docs)
    index([work / "tree"], work / "db", progress=False)
    fake = None
    if args.real:
        settings = Settings.from_env()
        if not settings.llm_base_url and not settings.llm_api_key:
            sys.exit("--real needs QUARRY_LLM_BASE_URL or QUARRY_LLM_API_KEY (docs/answers.md)")
    else:
        from fakeopenai import FakeOpenAI

        fake = FakeOpenAI().start()
        fake.chat_handler = scripted
        settings = Settings.from_env(llm_base_url=fake.base_url, llm_model="fake-chat", llm_api_key="")
    rows = []
    head = (
        f"{'id':>6} {'status':>9} {'retr ms':>8} {'gen ms':>8} {'psg':>4} {'tok in':>7} {'tok out':>7} "
        f"{'kept':>4} {'drop':>4} {'uncit':>5} {'quote':>5} {'rel':>4}"
    )
    print(head, file=out, flush=True)
    with quarry.open(work / "db", settings) as idx:
        if fake is not None:  # warm the maps, the query model and the client (a real model is asked once per question)
            idx.answer(questions[0]["text"], max_context_tokens=args.max_context_tokens)
        for q in questions:
            a = idx.answer(q["text"], max_context_tokens=args.max_context_tokens)
            cited_docs = {Path(c.path).stem for c in a.citations}
            rows.append(
                {
                    "id": q["id"],
                    "status": a.status,
                    "retrieve_ms": a.timings.get("retrieve", 0.0),
                    "generate_ms": a.timings.get("generate", 0.0),
                    "total_ms": a.timings.get("total", 0.0),
                    "passages": len(a.evidence),
                    "prompt_tokens": a.usage.get("prompt_tokens", 0),
                    "completion_tokens": a.usage.get("completion_tokens", 0),
                    "kept": len(a.citations),
                    "dropped": len(a.dropped),
                    "uncited": len(a.uncited),
                    "quotes_found": sum(1 for x in a.quotes if x["found"]),
                    "quotes": len(a.quotes),
                    "cites_relevant": bool(cited_docs & set(q["relevant"])),
                    "error": a.error,
                }
            )
            r = rows[-1]  # printed as it comes: a real model may take minutes an answer
            print(
                f"{r['id']:>6} {r['status']:>9} {r['retrieve_ms']:8.1f} {r['generate_ms']:8.1f} {r['passages']:4d} "
                f"{r['prompt_tokens']:7d} {r['completion_tokens']:7d} {r['kept']:4d} {r['dropped']:4d} "
                f"{r['uncited']:5d} {r['quotes_found']}/{r['quotes']:<3} {'yes' if r['cites_relevant'] else 'no':>4}",
                file=out,
                flush=True,
            )
    if fake is not None:
        fake.stop()
    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    summary = {
        "questions": len(rows),
        "model": "fake" if fake is not None else settings.answer_model or settings.llm_model_name,
        "docs": args.docs,
        "embed": args.embed,
        "max_context_tokens": args.max_context_tokens,
        "answered": sum(r["status"] == "answered" for r in rows),
        "not_found": sum(r["status"] == "not_found" for r in rows),
        "errors": sum(r["status"] == "error" for r in rows),
        "p50_retrieve_ms": med("retrieve_ms"),
        "p50_generate_ms": med("generate_ms"),
        "p50_total_ms": med("total_ms"),
        "p50_prompt_tokens": med("prompt_tokens"),
        "p50_completion_tokens": med("completion_tokens"),
        "citations_kept": sum(r["kept"] for r in rows),
        "citations_dropped": sum(r["dropped"] for r in rows),
        "sentences_uncited": sum(r["uncited"] for r in rows),
        "cites_a_judged_relevant_abstract": sum(r["cites_relevant"] for r in rows),
        "load": os.getloadavg()[0],
    }
    print(
        f"\n{summary['answered']} answered, {summary['not_found']} not found, {summary['errors']} errors of "
        f"{summary['questions']} ({summary['model']}); p50 retrieve {summary['p50_retrieve_ms']:.1f} ms, generate "
        f"{summary['p50_generate_ms']:.1f} ms, total {summary['p50_total_ms']:.1f} ms; p50 tokens "
        f"{summary['p50_prompt_tokens']:.0f} in / {summary['p50_completion_tokens']:.0f} out; citations kept "
        f"{summary['citations_kept']}, dropped {summary['citations_dropped']}, uncited sentences "
        f"{summary['sentences_uncited']}; a judged-relevant abstract cited in "
        f"{summary['cites_a_judged_relevant_abstract']}; load {summary['load']:.1f}",
        file=out,
    )
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    payload = {"summary": summary, "rows": rows}
    (results / "answers.json").write_text(json.dumps(payload, indent=2))
    if args.json:
        print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
