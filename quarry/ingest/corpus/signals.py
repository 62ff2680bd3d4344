"""Every corpus signal of a document and of its chunks, as the catalog's columns hold them
(sql/schema.sql): the one place that names them."""

from __future__ import annotations

from quarry.ingest.corpus import language, minhash, pii, quality

__all__ = ["DOCUMENT_COLUMNS", "CHUNK_COLUMNS", "PII_COLUMNS", "document_signals", "chunk_signals", "empty_chunk"]

PII_COLUMNS = tuple(f"pii_{k}" for k in pii.KINDS) + ("pii_total",)
DOCUMENT_COLUMNS = ("content_hash", "minhash", "lsh_bands", "lang", "pii_total")
CHUNK_COLUMNS = ("norm_hash", "line_hashes", "lang", *PII_COLUMNS, *quality.COLUMNS)


def document_signals(text: str, chunk_rows: list[dict]) -> dict:
    """A document's columns from its parsed text (and its chunks' signals, for the PII total)."""
    sig = minhash.signature(text)
    return {
        "content_hash": minhash.content_hash(text),
        "minhash": minhash.to_blob(sig),
        "lsh_bands": minhash.band_keys(sig) if sig is not None else None,
        "lang": language.detect(text),
        "pii_total": sum(c["pii_total"] for c in chunk_rows),
    }


def chunk_signals(text: str) -> dict:
    """A chunk's columns from its text (the header, written by quarry, is not read)."""
    found = pii.counts(text)
    return {
        "norm_hash": minhash.short_hash(text),
        "line_hashes": minhash.line_hashes(text) or None,
        "lang": language.detect(text, language.CHUNK_CHARS),
        **{f"pii_{k}": v for k, v in found.items()},
        "pii_total": sum(found.values()),
        **quality.signals(text),
    }


def empty_chunk() -> dict:
    """NULL signals (a chunk built without them: tests, older code paths)."""
    return dict.fromkeys(CHUNK_COLUMNS)
