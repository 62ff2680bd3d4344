"""Quality signals of a chunk's text, after Gopher's (Rae et al. 2021, appendix A) and C4's
heuristics. Each is a plain number; thresholds are the reader's (docs/corpus.md gives Gopher's).

With ``words`` the whitespace-separated tokens of the text and ``chars(x)`` the characters of the
words in ``x``:

- ``q_words``: ``len(words)``;
- ``q_mean_word``: ``chars(words) / len(words)`` (Gopher keeps 3..10);
- ``q_alpha``: share of words holding at least one letter (Gopher keeps >= 0.8);
- ``q_dup_lines``: characters of lines that occur more than once in the text (non-empty lines,
  stripped), over the characters of all lines (Gopher drops > 0.2);
- ``q_top_2gram``: characters of the most frequent word 2-gram times its count, over
  ``chars(words)`` (Gopher drops > 0.2);
- ``q_dup_5gram``: characters of words covered by word 5-grams that occur more than once, over
  ``chars(words)`` (Gopher drops > 0.15).

An empty text has 0 for every signal.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["COLUMNS", "signals"]

COLUMNS = ("q_words", "q_mean_word", "q_alpha", "q_dup_lines", "q_top_2gram", "q_dup_5gram")


def signals(text: str) -> dict[str, float]:
    """The :data:`COLUMNS` of ``text``."""
    words = text.split()
    if not words:
        return {"q_words": 0, **dict.fromkeys(COLUMNS[1:], 0.0)}
    lengths = [len(w) for w in words]
    total = sum(lengths)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    seen = Counter(lines)
    line_chars = sum(len(ln) for ln in lines)
    dup_lines = sum(len(ln) for ln in lines if seen[ln] > 1)
    lower = [w.lower() for w in words]
    top = 0.0
    if len(lower) >= 2:
        grams = Counter(zip(lower, lower[1:]))
        gram, count = grams.most_common(1)[0]
        top = (len(gram[0]) + len(gram[1])) * count / total if count > 1 else 0.0
    covered = [False] * len(words)
    if len(lower) >= 5:
        fives = Counter(tuple(lower[i : i + 5]) for i in range(len(lower) - 4))
        for i in range(len(lower) - 4):
            if fives[tuple(lower[i : i + 5])] > 1:
                covered[i : i + 5] = [True] * 5
    return {
        "q_words": len(words),
        "q_mean_word": round(total / len(words), 4),
        "q_alpha": round(sum(any(c.isalpha() for c in w) for w in words) / len(words), 4),
        "q_dup_lines": round(dup_lines / line_chars, 4) if line_chars else 0.0,
        "q_top_2gram": round(min(top, 1.0), 4),
        "q_dup_5gram": round(sum(n for n, c in zip(lengths, covered) if c) / total, 4),
    }
