"""Language, quality signals and boilerplate per chunk, and `quarry corpus report` over a small tree."""

from __future__ import annotations

import json

import pytest
from test_dedup import DISCLAIMER, PAGE, write

from quarry.retrieval.corpus import language, quality


@pytest.mark.parametrize(
    "text, lang",
    [
        ("This is an English sentence about deploying software to production on Fridays.", "en"),
        ("Das ist ein deutscher Satz über die Bereitstellung von Software in Produktion.", "de"),
        ("Ceci est une phrase en français sur le déploiement du logiciel en production.", "fr"),
        ("Esta es una frase en español sobre el despliegue de software en producción.", "es"),
        ("12 34 56 -- ok", "und"),  # too few letters to tell
    ],
)
def test_language(text, lang):
    assert language.detect(text) == lang


def test_quality_signals_follow_their_formulas():
    q = quality.signals("the cat sat\nthe cat sat\nno 42")
    # words: the cat sat the cat sat no 42 -> 8 words, 22 characters
    assert q["q_words"] == 8 and q["q_mean_word"] == round(22 / 8, 4)
    assert q["q_alpha"] == round(7 / 8, 4)  # "42" holds no letter
    assert q["q_dup_lines"] == round(22 / 27, 4)  # two "the cat sat" lines of 11 over 27 line characters
    assert q["q_top_2gram"] == round(6 * 2 / 22, 4)  # "the cat" (6 characters) twice
    assert q["q_dup_5gram"] == 0.0  # no 5-gram occurs twice
    q = quality.signals("a b c d e x a b c d e")  # "a b c d e" twice: 10 of 11 word characters
    assert q["q_dup_5gram"] == round(10 / 11, 4)
    assert quality.signals("") == {"q_words": 0, **dict.fromkeys(quality.COLUMNS[1:], 0.0)}


def test_corpus_report(tmp_path, run_flow, cli):
    tree = tmp_path / "tree"
    write(tree / "handbook" / "onboarding.md", PAGE, age=300)
    write(tree / "archive" / "onboarding.md", PAGE, age=100)
    for name in ("a", "b", "c"):
        write(
            tree / "other" / f"{name}.md",
            f"# {name}\n\nA page about {name * 3} and its own topic, with words "
            f"that only page {name} uses: {name}{name}x.\n\n{DISCLAIMER}\n",
        )
    write(
        tree / "other" / "de.md",
        "# Urlaub\n\nUrlaub wird im Portal beantragt und vom Vorgesetzten genehmigt; "
        "Resturlaub verfällt am Ende des ersten Quartals. Schreiben Sie an "
        "hr@example.org.\n",
    )
    run_flow([tree], tmp_path / "db")
    done = cli("corpus", "report", "--db", tmp_path / "db", "--json")
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert (r["documents"], r["copies"], r["clusters"]) == (6, 1, 1)
    assert r["bytes_saved"] == len(PAGE.encode())
    assert [(d["folder"], d["copies"]) for d in r["duplicates"]] == [("archive", 1)]
    assert {x["lang"] for x in r["languages"]} == {"en", "de"}
    assert {p["kind"]: p["total"] for p in r["pii"]}["email"] == 1
    (root,) = r["boilerplate"]
    # the disclaimer, in 4 documents, is half the lines of the three short pages, a sixth of the long one
    assert root["boilerplate_lines"] == 1 and root["boilerplate_chunks"] == 3
    text = cli("corpus", "report", "--db", tmp_path / "db")
    assert "1 copies in 1 clusters" in text.stdout and "email" in text.stdout


EN = "This is an English sentence about deploying software to production on Fridays."
DE = "Das ist ein deutscher Satz über die Bereitstellung von Software in Produktion."


def test_chunks_take_the_documents_language_only_when_probes_agree():
    from quarry.retrieval.corpus.signals import record_signals

    doc, chunks = record_signals(" ".join([EN] * 5), [EN, EN, "x 1", EN, EN])
    assert doc["lang"] == "en" and [c["lang"] for c in chunks] == ["en", "en", "und", "en", "en"]
    doc, chunks = record_signals(" ".join([EN] * 5), [EN, DE, DE, EN, EN])  # the middle probe (of 0, 2, 4) is German
    assert [c["lang"] for c in chunks] == ["en", "de", "de", "en", "en"]
