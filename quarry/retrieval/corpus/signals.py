"""Every corpus signal of a document and of its chunks, as the catalog's columns hold them
(sql/schema.sql): the one place that names them."""

from __future__ import annotations

from typing import Any

from quarry.retrieval.corpus import language, minhash, pii, quality

__all__ = [
    "DOCUMENT_COLUMNS",
    "CHUNK_COLUMNS",
    "PII_COLUMNS",
    "LANGUAGE_PROBES",
    "record_signals",
    "document_signals",
    "chunk_signals",
    "empty_chunk",
]

LANGUAGE_PROBES = 3  # chunks of a document whose language is read before its other chunks inherit the document's

PII_COLUMNS = tuple(f"pii_{k}" for k in pii.KINDS) + ("pii_total",)
DOCUMENT_COLUMNS = ("content_hash", "minhash", "lsh_bands", "lang", "pii_total")
# boilerplate: set by the commit, which counts lines across the root (quarry/store/boilerplate.py)
CHUNK_COLUMNS = ("norm_hash", "line_hashes", "lang", *PII_COLUMNS, *quality.COLUMNS, "boilerplate")


def document_signals(text: str, chunk_rows: list[dict[str, Any]], lang: str | None = None) -> dict[str, Any]:
    """A document's columns from its parsed text (and its chunks' signals, for the PII total)."""
    sig = minhash.signature(text)
    return {
        "content_hash": minhash.content_hash(text),
        "minhash": minhash.to_blob(sig),
        "lsh_bands": minhash.band_keys(sig) if sig is not None else None,
        "lang": lang if lang is not None else language.detect(text),
        "pii_total": sum(c["pii_total"] for c in chunk_rows),
    }


def record_signals(text: str, chunk_texts: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A document's columns and its chunks', from its parsed text and its chunks' texts.

    Language costs most (py3langid scores in a Python loop: 5 ms a chunk under load): up to
    :data:`LANGUAGE_PROBES` chunks, spread over the document, are read first; when they all agree
    with the document's language, every other chunk with enough letters takes it, else each chunk
    is read (a document in two languages)."""
    doc_lang = language.detect(text)
    n = len(chunk_texts)
    probes = sorted({round(i * (n - 1) / max(1, LANGUAGE_PROBES - 1)) for i in range(LANGUAGE_PROBES)}) if n else []
    langs: dict[int, str] = {i: language.detect(chunk_texts[i], language.CHUNK_CHARS) for i in probes}
    uniform = all(v in (doc_lang, language.UNDETERMINED) for v in langs.values())
    chunks = []
    for i, t in enumerate(chunk_texts):
        if i not in langs:
            langs[i] = (
                (doc_lang if language.has_letters(t, language.CHUNK_CHARS) else language.UNDETERMINED)
                if uniform
                else language.detect(t, language.CHUNK_CHARS)
            )
        chunks.append(chunk_signals(t, langs[i]))
    return document_signals(text, chunks, doc_lang), chunks


def chunk_signals(text: str, lang: str | None = None) -> dict[str, Any]:
    """A chunk's columns from its text (the header, written by quarry, is not read); ``lang``
    when the caller knows it already."""
    found = pii.counts(text)
    return {
        "norm_hash": minhash.short_hash(text),
        "line_hashes": minhash.line_hashes(text) or None,
        "lang": lang if lang is not None else language.detect(text, language.CHUNK_CHARS),
        **{f"pii_{k}": v for k, v in found.items()},
        "pii_total": sum(found.values()),
        **quality.signals(text),
    }


def empty_chunk() -> dict[str, Any]:
    """NULL signals (a chunk built without them: tests, older code paths)."""
    return dict.fromkeys(CHUNK_COLUMNS)
