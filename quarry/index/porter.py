"""The Porter stemmer, as Snowball's ``porter`` algorithm (the one DuckDB's ``stem(w, 'porter')`` runs).

The index is built with DuckDB's ``stem()``; queries stem here, so the read path never loads
DuckDB's FTS extension (half a second of a cold ``quarry search``). ``tests/test_bm25.py``
checks that both give the same stem for every word of real text.

Reference: M. F. Porter, "An algorithm for suffix stripping", 1980, and
https://snowballstem.org/algorithms/porter/stemmer.html (its Snowball definition).
"""

from __future__ import annotations

from functools import lru_cache

_V = frozenset("aeiouy")  # "Y" (a consonant y, marked below) is not a vowel

_STEP2 = {
    "tional": "tion", "enci": "ence", "anci": "ance", "abli": "able", "entli": "ent", "eli": "e",
    "izer": "ize", "ization": "ize", "ational": "ate", "ation": "ate", "ator": "ate", "alli": "al",
    "alism": "al", "aliti": "al", "ousli": "ous", "ousness": "ous", "iveness": "ive", "iviti": "ive",
    "biliti": "ble", "fulness": "ful",
}
_STEP3 = {"alize": "al", "icate": "ic", "iciti": "ic", "ical": "ic", "ative": "", "ful": "", "ness": ""}
_STEP4 = ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ou", "ism", "ate",
          "iti", "ous", "ive", "ize", "ion")


def _longest(word: str, suffixes) -> str | None:
    best = None
    for suffix in suffixes:
        if word.endswith(suffix) and (best is None or len(suffix) > len(best)):
            best = suffix
    return best


def _shortv(word: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or Y."""
    return (len(word) >= 3 and word[-1] not in _V and word[-1] not in "wxY" and word[-2] in _V
            and word[-3] not in _V)


def _region(word: str, start: int) -> int:
    """The position after the first non-vowel that follows a vowel, from ``start`` (R1, R2)."""
    n, i = len(word), start
    while i < n and word[i] not in _V:
        i += 1
    i += 1
    while i < n and word[i] in _V:
        i += 1
    return min(n, i + 1)


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Porter stem of a lower-case word."""
    if not word:
        return word
    chars = list(word)
    y_found = False
    for i, ch in enumerate(chars):  # y at the start or after a vowel is a consonant: Y
        if ch == "y" and (i == 0 or chars[i - 1] in _V):
            chars[i] = "Y"
            y_found = True
    w = "".join(chars)
    p1 = _region(w, 0)
    p2 = _region(w, p1) if p1 < len(w) else len(w)

    # Step 1a
    if w.endswith("sses") or w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    # Step 1b
    if w.endswith("eed"):
        if len(w) - 3 >= p1:
            w = w[:-1]
    else:
        suffix = "ed" if w.endswith("ed") else "ing" if w.endswith("ing") else None
        if suffix and any(c in _V for c in w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if w.endswith(("at", "bl", "iz")):
                w += "e"
            elif len(w) >= 2 and w[-1] == w[-2] and w[-1] in "bdfgmnprt":
                w = w[:-1]
            elif len(w) == p1 and _shortv(w):
                w += "e"
    # Step 1c
    if w.endswith(("y", "Y")) and any(c in _V for c in w[:-1]):
        w = w[:-1] + "i"
    # Step 2
    suffix = _longest(w, _STEP2)
    if suffix and len(w) - len(suffix) >= p1:
        w = w[: -len(suffix)] + _STEP2[suffix]
    # Step 3
    suffix = _longest(w, _STEP3)
    if suffix and len(w) - len(suffix) >= p1:
        w = w[: -len(suffix)] + _STEP3[suffix]
    # Step 4
    suffix = _longest(w, _STEP4)
    if suffix and len(w) - len(suffix) >= p2:
        if suffix != "ion" or w[:-3].endswith(("s", "t")):
            w = w[: -len(suffix)]
    # Step 5a
    if w.endswith("e"):
        at = len(w) - 1
        if at >= p2 or (at >= p1 and not _shortv(w[:-1])):
            w = w[:-1]
    # Step 5b
    if w.endswith("ll") and len(w) - 1 >= p2:
        w = w[:-1]
    return w.replace("Y", "y") if y_found else w
