"""``quarry eval``: index a BEIR collection through the real flow, then score every query.

The corpus is written as one Markdown file per record under the store (so a second eval on
the same store is an unchanged re-index), indexed by the caller's ``index`` function (the
Prefect flow), and searched through :mod:`quarry.search.query`, which never imports Prefect.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from quarry.core.settings import store_path
from quarry.eval.evaluation import chunk_ranking_to_docs, evaluate, load_beir, write_corpus_tree
from quarry.eval.scoring import eval_rows
from quarry.store import evals

CHUNKS_PER_QUERY = 200  # chunk hits per query: enough distinct documents for recall@100


def run_beir_eval(
    beir_dir: str,
    db: str | None,
    modes: Iterable[str],
    split: str = "test",
    limit: int | None = None,
    index: Callable[[list[str], Path], dict] | None = None,
    search_kwargs: dict | None = None,
    record: bool = True,
) -> dict:
    """Index ``beir_dir`` into ``db`` (a temporary store when None) and score ``modes``; with ``record``,
    a row per mode goes to the store's ``evals`` (set ``beir-<name>-<split>``)."""
    import quarry

    beir = load_beir(beir_dir, split)
    store = store_path(db) if db else Path(tempfile.mkdtemp(prefix="quarry-eval-")) / "store"
    tree = store.parent / f"{store.name}-corpus" / beir.name
    mapping = write_corpus_tree(beir, str(tree))
    if index is not None:
        index([str(tree)], store)
    by_path = {str((tree / rel).resolve()): doc_id for rel, doc_id in mapping.items()}
    qids = sorted(beir.queries)[:limit] if limit else sorted(beir.queries)
    qrels = {q: beir.qrels[q] for q in qids}
    out: dict[str, Any] = {"dataset": beir.name, "split": split, "queries": len(qids), "modes": {}}
    with quarry.open(store) as idx:
        idx.prime_queries([beir.queries[q] for q in qids])
        for mode in modes:
            rankings = {}
            for q in qids:
                response = idx.search(beir.queries[q], k=CHUNKS_PER_QUERY, mode=mode, **(search_kwargs or {}))
                rankings[q] = chunk_ranking_to_docs([by_path.get(r.path, r.path) for r in response.results])
            out["modes"][mode] = evaluate(rankings, qrels)
        out["generation"] = idx.generation
    if record:
        scored = {
            mode: {"metrics": m, "generation": out["generation"], "questions": len(qids)}
            for mode, m in out["modes"].items()
        }
        for row in eval_rows(
            f"beir-{beir.name}-{split}",
            "beir",
            scored,
            10,
            {"split": split, **(search_kwargs or {})},
            questions=len(qids),
        ):
            evals.record(store, row)
    return out
