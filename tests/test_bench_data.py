"""The long-PDF bench's own question set (bench/data/longpdf-kinds.json) stays well formed: every
question names a listed PDF and judges pages, splits are by document, and bench/longpdf.py reads it
the way the bench does."""

import json
from pathlib import Path

from conftest import ROOT, bench_module

KINDS = ROOT / "bench" / "data" / "longpdf-kinds.json"


def _longpdf():
    return bench_module("longpdf")


def test_kinds_questions_are_judged_by_page_and_split_by_document():
    spec = json.loads(KINDS.read_text())
    docs, questions = spec["documents"], spec["questions"]
    assert {d["split"] for d in docs.values()} == {"train", "test"}
    assert all(d["kind"] and d["source"] for d in docs.values())
    texts = [q["question"] for q in questions]
    assert len(texts) == len(set(texts)), "a question is listed twice"
    for q in questions:
        assert q["file"] in docs, q
        assert q["pages"] and all(isinstance(p, int) and p >= 1 for p in q["pages"]), q
        assert len(q["pages"]) == len(set(q["pages"])), q
    asked = {q["file"] for q in questions}
    assert asked == set(docs), f"documents without questions: {set(docs) - asked}"


def test_the_bench_reads_only_the_questions_of_pdfs_it_has(tmp_path):
    longpdf = _longpdf()
    spec = json.loads(KINDS.read_text())
    some = sorted(spec["documents"])[:3]
    for name in some:
        (tmp_path / name).write_bytes(b"%PDF-1.4\n")
    qs = longpdf.kinds_questions(tmp_path)
    assert qs and {q["pages"][0][0] for q in qs} == {Path(n).stem for n in some}
    assert all(q["split"] == spec["documents"][f"{q['pages'][0][0]}.pdf"]["split"] for q in qs)
    assert len(qs) == sum(q["file"] in some for q in spec["questions"])
