"""The language of a text: an ISO 639-1 code from py3langid (langid.py's 97-language model, 2 MB,
packaged with the library, no download).

Chosen over lingua (lingua-language-detector): lingua is more accurate on a few words but its
wheel carries every language's n-gram models (hundreds of MB) and loads them into memory; a
document or a chunk of 100+ words is py3langid's easy case (``bench/dedup.py --languages``).
"""

from __future__ import annotations

import re
import threading
from typing import Any

__all__ = ["UNDETERMINED", "detect", "has_letters"]

UNDETERMINED = "und"  # ISO 639-2 for a text too short or without letters to tell
MIN_LETTERS = 20
MIN_CONFIDENCE = 0.5  # below it (py3langid's normalised probability) a text of links, code or lists is ``und``
SAMPLE_CHARS = 2_000  # a long document's language is read from its start
CHUNK_CHARS = 600  # a chunk's from its first 600 characters: py3langid's scoring loop is Python, linear in bytes
_LETTERS = re.compile(r"[^\W\d_]", re.UNICODE)
_lock = threading.Lock()
_model = None


def _identifier() -> Any:
    global _model
    with _lock:
        if _model is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _model


def has_letters(text: str, sample_chars: int = SAMPLE_CHARS) -> bool:
    """Whether ``text`` holds enough letters (:data:`MIN_LETTERS`) to have a language."""
    return len(_LETTERS.findall(text[:sample_chars])) >= MIN_LETTERS


def detect(text: str, sample_chars: int = SAMPLE_CHARS) -> str:
    """The language code of ``text`` (``en``, ``de``; ``zxx``: no linguistic content),
    :data:`UNDETERMINED` below :data:`MIN_LETTERS` letters or :data:`MIN_CONFIDENCE`."""
    sample = text[:sample_chars]
    if len(_LETTERS.findall(sample)) < MIN_LETTERS:
        return UNDETERMINED
    lang, confidence = _identifier().classify(sample)
    return lang if confidence >= MIN_CONFIDENCE else UNDETERMINED
