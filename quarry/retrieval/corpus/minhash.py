"""Exact and near-duplicate signatures of a text: a content hash of the normalised text and a
MinHash signature of its word shingles, with the LSH band keys the catalog stores.

Library: rensa (``RMinHash``, Rust, no dependencies) rather than datasketch. Measured on 600
handbook pages (613K 5-word shingles, 128 permutations, load ~5 on 2 shared cores,
``bench/dedup.py --libraries``): rensa 0.016 s, datasketch 0.96 s (60x), the same mean
absolute Jaccard error against exact sets (0.0005); datasketch also pulls in scipy (for its LSH
parameter search). Neither library's LSH index can live in the catalog's layers, so the index is
the ``lsh_bands`` column itself (band keys computed here, candidates found by SQL,
quarry/store/dedup.py): it is written, merged, rolled back and uploaded with the documents rows.

Bands: :data:`BANDS` x :data:`ROWS` = 120 of the 128 permutations. The chance that a pair of
Jaccard ``s`` shares a band is ``1 - (1 - s**6)**20``: 0.998 at 0.8, 0.92 at 0.7, 0.27 at 0.5;
candidates are then kept only when their signatures agree on at least the threshold's share of
permutations, so thresholds from about 0.7 up find nearly every pair.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np

__all__ = [
    "line_hashes",
    "line_hash",
    "NUM_PERM",
    "BANDS",
    "ROWS",
    "SHINGLE",
    "normalise",
    "content_hash",
    "short_hash",
    "signature",
    "band_keys",
    "similarity",
    "to_blob",
    "from_blob",
]

NUM_PERM = 128
BANDS = 20
ROWS = 6
SHINGLE = 4  # words per shingle: a short page with one phrase edited keeps 0.88 (tests/test_dedup.py)
SEED = 1
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Case-folded NFKC words joined by single spaces: what two copies of a document that differ
    only in layout, punctuation or case have in common."""
    return " ".join(_NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


def content_hash(text: str) -> str:
    """sha256 of the normalised text: equal for exact copies (a re-saved file, another format)."""
    return hashlib.sha256(normalise(text).encode()).hexdigest()


def short_hash(text: str) -> str:
    """The first 16 hex digits of :func:`content_hash`: a chunk's passage identity."""
    return content_hash(text)[:16]


def signature(text: str) -> np.ndarray | None:
    """The MinHash signature (uint32, :data:`NUM_PERM`) of the text's word shingles; None when the
    text has no words."""
    import rensa

    words = normalise(text).split()
    if not words:
        return None
    n = min(SHINGLE, len(words))
    shingles = [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    m = rensa.RMinHash(NUM_PERM, SEED)
    m.update(shingles)
    return np.asarray(m.digest(), dtype=np.uint32)


def band_keys(sig: np.ndarray) -> list[int]:
    """One signed 64-bit key per band (the band's number is hashed in, so keys of different bands
    never meet): two documents sharing a key are LSH candidates."""
    out = []
    for b in range(BANDS):
        digest = hashlib.blake2b(sig[b * ROWS : (b + 1) * ROWS].tobytes(), digest_size=8, person=b"qb%02d" % b).digest()
        out.append(int.from_bytes(digest, "little", signed=True))
    return out


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Estimated Jaccard similarity of two signatures: the share of permutations they agree on."""
    return float(np.count_nonzero(a == b)) / len(a)


def to_blob(sig: np.ndarray | None) -> bytes | None:
    return None if sig is None else sig.astype("<u4").tobytes()


def from_blob(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype="<u4")


MIN_LINE_CHARS = 20  # shorter lines (a bullet, "Contents") repeat for reasons other than boilerplate


def line_hash(line: str) -> int | None:
    """A signed 64-bit hash of a line's normalised text; None for a line shorter than
    :data:`MIN_LINE_CHARS` normalised characters (never counted)."""
    norm = normalise(line)
    if len(norm) < MIN_LINE_CHARS:
        return None
    return int.from_bytes(hashlib.blake2b(norm.encode(), digest_size=8).digest(), "little", signed=True)


def line_hashes(text: str) -> list[int]:
    """:func:`line_hash` of each distinct line of at least :data:`MIN_LINE_CHARS` characters: what
    boilerplate detection counts across a root's documents (docs/corpus.md)."""
    return sorted({h for h in map(line_hash, text.splitlines()) if h is not None})
