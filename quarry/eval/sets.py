"""Question sets kept with the store: generate one (``quarry eval generate``), export it as JSONL or as a
BEIR folder (``queries.jsonl`` and ``qrels/test.tsv`` judging the source document; ``corpus.jsonl`` is
left out: the corpus is the store, ``quarry export`` writes it)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from quarry.core.errors import UsageError
from quarry.eval.questions import generate
from quarry.store import evals

__all__ = ["generate_set", "export_set"]


def generate_set(
    idx,
    n: int = 200,
    method: str = "known-item",
    seed: int = 0,
    name: str | None = None,
    principals=None,
    llm_overrides: dict | None = None,
    llm=None,
) -> tuple[dict, Path]:
    """Draw a set from ``idx`` and keep it in the store as ``name`` (default ``METHOD-SEED``): (header, file)."""
    name = evals.check_name(name or f"{method}-{seed}")
    if method == "llm" and llm is None:
        from quarry.core.settings import Settings
        from quarry.eval.llmquestions import QuestionWriter

        settings = Settings.from_env(**{k: v for k, v in (llm_overrides or {}).items() if v})
        llm = QuestionWriter.from_settings(settings, idx.store)
    try:
        header, questions = generate(idx, n, method, seed, principals, llm=llm)
    finally:
        if llm is not None and hasattr(llm, "close"):
            llm.close()
    header = {
        **header,
        "name": name,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "questions": len(questions),
    }
    if llm is not None and getattr(llm, "rejected", None):
        header["rejected"] = dict(llm.rejected)
    if len(questions) < n:
        header["notes"] = [f"{len(questions)} of {n} questions: the corpus gave no more usable ones"]
    return header, evals.save_set(idx.store, name, header, questions)


def export_set(store, set_ref: str, out: str, fmt: str = "jsonl") -> Path:
    """Write a stored set (or a JSONL file) to ``out`` as ``jsonl`` or a ``beir`` folder."""
    meta, questions = evals.load_set(store, set_ref)
    dest = Path(out)
    if fmt == "jsonl":
        if dest.is_dir():
            raise UsageError(f"--out {out} is a folder: give a FILE.jsonl (or --format beir)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions), encoding="utf-8")
        return dest
    if fmt != "beir":
        raise UsageError(f"unknown format {fmt!r}: jsonl or beir")
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"--out {out} is a file: a BEIR set is a folder")
    (dest / "qrels").mkdir(parents=True, exist_ok=True)
    with (dest / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for q in questions:
            fh.write(
                json.dumps(
                    {
                        "_id": q["id"],
                        "text": q["query"],
                        "metadata": {k: v for k, v in q.items() if k not in ("id", "query")},
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    with (dest / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q in questions:
            fh.write(f"{q['id']}\t{q['doc_id']}\t1\n")
    side = evals.set_path(store, meta["name"]).with_suffix(".meta.json") if "name" in meta else None
    if side is not None and side.is_file():
        shutil.copyfile(side, dest / "set.json")
    return dest
