"""BM25 tokenisation shared by indexing and querying.

DuckDB's FTS tokenizer drops every non-letter by default, so years, versions, error codes and
amounts would vanish. quarry tokenises in Python instead and hands DuckDB space-separated
tokens. A compound token keeps its whole form and adds its parts, so ``v1.4.4`` is found by
``v1.4.4`` and ``FY2018`` by ``2018``:

    "FY2018"  -> fy2018 fy 2018
    "v1.4.4"  -> v144 v1 4 4 144 v 1
    "E11000"  -> e11000 e 11000
"""

from __future__ import annotations

import re
import unicodedata

# A word: letters/digits, optionally joined by . - _ / : (e.g. v1.4.4, utf-8, a/b, 10:30).
WORD = re.compile(r"\w+(?:[.,\-_/:']\w+)*")
_CONNECTOR = re.compile(r"[.,\-_/:']")
_RUNS = re.compile(r"\d+|[^\W\d_]+")
_LEAD = re.compile(r"[^\W\d_]+(?=\d)")  # letters that start a compound of numbers: the v of v1.4.4


def _fold(text: str) -> str:
    # Accents are stripped so "naïve" and "naive" meet; DuckDB's strip_accents does the same
    # to what we hand it, this just keeps the two sides identical. ASCII text (most of it)
    # skips the Unicode work; otherwise each distinct non-ASCII character is judged once.
    text = text.lower()
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    drop: dict[int, None] = {}
    for ch in set(decomposed):
        if not ch.isascii():
            mark = _COMBINING.get(ch)
            if mark is None:
                mark = _COMBINING.setdefault(ch, bool(unicodedata.combining(ch)))
            if mark:
                drop[ord(ch)] = None
    return decomposed.translate(drop) if drop else decomposed


_COMBINING: dict[str, bool] = {}


def tokens(text: str) -> list[str]:
    """The BM25 tokens of ``text``, in order."""
    out: list[str] = []
    for word in WORD.findall(_fold(text)):
        if word.isalpha() or word.isdecimal():  # one run, no connector: the word alone (fast path)
            out.append(word)
            continue
        parts = [p for p in _CONNECTOR.split(word) if p]
        whole = "".join(parts)
        out.append(whole)
        if len(parts) > 1:
            out.extend(parts)
            lead = _LEAD.match(whole)
            if lead and whole[lead.end() :] not in parts:  # "v1.4.4" is also found by "1.4.4": both have 144
                out.append(whole[lead.end() :])
        for part in parts:
            runs = _RUNS.findall(part)
            if len(runs) > 1:
                out.extend(runs)
    return out


def bm25_text(text: str) -> str:
    """``text`` as one space-separated string of BM25 tokens."""
    return " ".join(tokens(text))
