"""Build the ONNX files the ``onnx`` and ``onnx-int8`` backends run. Runs once per cache key.

Three steps, each a plain function:

1. :func:`export_fp32` writes the BERT encoder from the bundled safetensors weights with
   ``onnx.helper`` (:mod:`quarry.ingest.embedders.onnx_graph`; no torch). The output is the token
   embeddings; pooling happens in numpy.
2. :func:`fuse` runs onnxruntime's transformer optimizer, which folds each layer's attention
   into one ``Attention`` kernel and bias + GELU into ``BiasGelu``. It leaves residual adds and
   layer norms apart: onnxruntime's CPU ``SkipLayerNormalization`` kernel takes three times as
   long as ``Add`` + ``LayerNormalization`` (measured with onnxruntime 1.32).
3. :func:`quantize_int8` quantises weights to int8 per channel and activations to uint8 per
   tensor at run time (dynamic quantisation). Done naively this costs too much accuracy
   (cosine to fp32 as low as 0.985): a few channels of each feed-forward block spike to 5-10x
   the range of the rest and squeeze every other value of the tensor into a handful of
   quantisation levels. :func:`tame_ffn_outliers` fixes that before quantising (cosine to
   fp32 then >= 0.995 on 600 real chunks).

Nothing here imports torch: building needs ``onnx``, ``safetensors`` and onnxruntime's tools.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

import numpy as np

from quarry.core.errors import EmbeddingError

if TYPE_CHECKING:
    from onnx import NodeProto

# Varied short texts (prose, code, markdown, logs, numbers) to find which channels spike.
# The spiking channels are a property of the model, not of the corpus, so a small fixed set
# finds the same ones as real chunks do.
CALIBRATION_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    'How do I reset my password? Go to Settings, then Security, and choose "Forgot password".',
    "# Getting started\n\nInstall the CLI with `pip install quarry` and run `quarry index ./docs`.",
    "- Step 1: open the file\n- Step 2: edit the config\n- Step 3: restart the service",
    "def embed(texts: list[str]) -> np.ndarray:\n    return model.encode(texts, normalize_embeddings=True)",
    "SELECT id, title FROM documents WHERE created_at > '2023-01-01' ORDER BY id LIMIT 10;",
    "See https://example.com/docs/v2/api-reference#authentication for details (RFC 6749, section 4.1).",
    "Revenue grew 12.5% year over year to $4.2 billion, while operating margin fell to 18%.",
    "Our engineering handbook describes how teams plan work, review code, and run incidents.",
    "The meeting is moved to Tuesday at 3 pm; please bring the quarterly report and the budget draft.",
    "Abstract. We propose a framework for classifying the capabilities and behavior of AI models.",
    "Table 2: Results on the benchmark. Accuracy (%) for each model size: 71.2, 74.8, 79.1.",
    "Prince Andrew looked at her in silence. The old count came in, smiling, and kissed his daughter.",
    "ERROR 2024-05-01T12:00:03Z worker[17]: connection refused (retry 3/5) at db.internal:5432",
    "Q: What is the capital of France? A: Paris is the capital and largest city of France.",
    "Die Größe der Datei überschreitet das Limit. Bitte verkleinern Sie das Dokument.",
    "Layout detection in documents: deep-learning models identify text blocks, figures and tables.",
    "Note that the on-call engineer is responsible for triage; escalate P0 incidents immediately!",
    '{"name": "quarry", "version": "0.1.0", "dependencies": ["numpy", "onnxruntime"]}',
    "1. Introduction\n\nLarge language models have made rapid progress, raising questions about how to measure it.",
    "a",
    "Thanks!",
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer.",
    "Customer support hours are Monday through Friday, 9 am to 5 pm Pacific Time, excluding holidays.",
]

# The int8 self-check (onnx_backend.build_int8): the calibration texts, short as queries are,
# and chunk-sized texts made of them, long as indexed chunks are (~100-160 tokens). One-word
# texts ("a", "Thanks!") are left out: their vectors rest on three or four tokens, where every
# variant, all-uint8 included, loses ~0.01 of cosine, so they cannot tell a saturating one.
SELF_CHECK_TEXTS = [t for t in CALIBRATION_TEXTS if len(t.split()) > 1] + [
    " ".join(CALIBRATION_TEXTS[i : i + 6]) for i in range(0, 24, 3)
]

OUTLIER_CHANNELS = 4  # per tensor; 2 already reach cosine >= 0.994 to fp32, 4 buys a little margin


def _need_onnx():
    try:
        import onnx
    except ImportError as exc:
        raise EmbeddingError("building the ONNX model needs the onnx package: pip install onnx") from exc
    return onnx


def export_fp32(model_path: str, dest: str) -> None:
    """Write the model at ``model_path`` to ``dest``: (input_ids, attention_mask) -> last_hidden_state.

    The graph is written from the safetensors weights by :mod:`quarry.ingest.embedders.onnx_graph`;
    no torch is involved.
    """
    from quarry.ingest.embedders.onnx_graph import write_graph

    write_graph(model_path, dest)


def fuse(src: str, dest: str, num_heads: int = 12, hidden_size: int = 384) -> dict[str, int]:
    """Fuse attention and bias + GELU with onnxruntime's BERT optimizer; returns fused op counts.

    Calls the optimizer's BERT class directly rather than ``optimize_model`` so that symbolic
    shape inference can be switched off: it needs sympy, which quarry does not depend on, and
    the BERT fusions do without it (they read the head count from the graph's constant shapes).
    """
    onnx = _need_onnx()
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.onnx_model_bert import BertOnnxModel

    options = FusionOptions("bert")
    options.enable_skip_layer_norm = False  # slower than Add + LayerNormalization on CPU
    options.enable_bias_skip_layer_norm = False
    with _quiet():
        optimized = BertOnnxModel(onnx.load(src), num_heads, hidden_size)
        optimized.disable_shape_inference()
        optimized.optimize(options)
        optimized.topological_sort()
        optimized.save_model_to_file(dest)
    return {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}


def channel_max(model_path: str, tensor_names: list[str], tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    """Largest absolute value per channel of each named tensor over ``texts``, padding excluded."""
    onnx = _need_onnx()
    import onnxruntime as ort

    model = onnx.load(model_path)
    for name in tensor_names:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    found: dict[str, np.ndarray] = {}
    encodings = tokenizer.encode_batch(texts)
    for start in range(0, len(encodings), 8):
        ids, mask = pad_batch(encodings[start : start + 8])
        keep = mask.astype(bool)
        for name, value in zip(tensor_names, session.run(tensor_names, {"input_ids": ids, "attention_mask": mask})):
            peak = np.abs(value[keep]).max(axis=0)
            found[name] = np.maximum(found[name], peak) if name in found else peak
    return found


def pad_batch(encodings) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad tokenizer encodings to the longest one: (input_ids, attention_mask), int64."""
    lengths = [len(e.ids) for e in encodings]
    ids = np.zeros((len(encodings), max(lengths)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, (enc, n) in enumerate(zip(encodings, lengths)):
        ids[row, :n] = enc.ids
        mask[row, :n] = 1
    return ids, mask


def tame_ffn_outliers(src: str, dest: str, tokenizer, k: int = OUTLIER_CHANNELS) -> list[str]:
    """Rewrite each feed-forward block of a fused model so dynamic int8 quantisation stays accurate.

    Per block ``y = GELU(x @ W1 + b1) @ W2 + b2``:

    - the ``k`` input channels of ``x`` that spike highest are scaled down to the range of the
      rest (a ``Mul`` before the matmul, the inverse folded into the rows of ``W1``);
    - the ``k`` hidden channels that spike highest are cut out of the int8 path (their columns
      of ``W1``/``b1`` and rows of ``W2`` zeroed; GELU(0) = 0) and computed in a small fp32 side
      path whose result is added to ``y``.

    Returns the names of the side-path matmuls, which must stay fp32.
    """
    onnx = _need_onnx()
    from onnx import helper, numpy_helper

    model = onnx.load(src)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def weighted_matmul(node: Any) -> TypeGuard[NodeProto]:
        return node is not None and node.op_type == "MatMul" and node.input[1] in inits

    blocks = []
    for gelu in (n for n in graph.node if n.op_type == "BiasGelu"):
        up = producer.get(gelu.input[0])
        after = consumers.get(gelu.output[0], [])
        down = after[0] if len(after) == 1 else None
        if not (weighted_matmul(up) and weighted_matmul(down)):
            raise EmbeddingError(f"unexpected feed-forward block around {gelu.name} in {src}; cannot quantise")
        # the side path joins after the bias add when there is one, so the int8 matmul keeps
        # its bias fusion
        joint = down
        nxt = consumers.get(down.output[0], [])
        if len(nxt) == 1 and nxt[0].op_type == "Add" and any(i in inits for i in nxt[0].input):
            joint = nxt[0]
        blocks.append((up, gelu, down, joint))
    if not blocks:
        raise EmbeddingError(f"{src} has no fused feed-forward blocks; was it fused?")

    names = [b[0].input[0] for b in blocks] + [b[1].output[0] for b in blocks]
    peaks = channel_max(src, names, tokenizer, CALIBRATION_TEXTS)

    def weight(name):
        return numpy_helper.to_array(inits[name]).astype(np.float32)

    def add_init(name, array):
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name))

    before: dict[int, list] = {}  # id(node) -> nodes to insert ahead of it
    side_matmuls: list[str] = []
    for i, (up, gelu, down, joint) in enumerate(blocks):
        w1, b1, w2 = weight(up.input[1]), weight(gelu.input[1]), weight(down.input[1])

        x_peak = peaks[up.input[0]]
        spikes = np.argsort(-x_peak)[:k]
        scale = np.ones_like(x_peak)
        scale[spikes] = np.maximum(x_peak[spikes] / np.delete(x_peak, spikes).max(), 1.0)
        scaled = f"ffn{i}_input_scaled"
        add_init(f"ffn{i}_input_inv_scale", 1.0 / scale)
        before.setdefault(id(up), []).append(
            helper.make_node("Mul", [up.input[0], f"ffn{i}_input_inv_scale"], [scaled], name=f"ffn{i}_InputScale")
        )
        up.input[0] = scaled
        w1 = w1 * scale[:, None]

        hidden = np.sort(np.argsort(-peaks[gelu.output[0]])[:k])
        add_init(f"ffn{i}_side_w1", w1[:, hidden])
        add_init(f"ffn{i}_side_b1", b1[hidden])
        add_init(f"ffn{i}_side_w2", w2[hidden])
        w1[:, hidden] = 0.0
        b1[hidden] = 0.0
        w2[hidden] = 0.0
        for name, array in ((up.input[1], w1), (gelu.input[1], b1), (down.input[1], w2)):
            inits[name].CopyFrom(numpy_helper.from_array(array, name))
        n = f"ffn{i}_side"
        side = [
            helper.make_node("MatMul", [scaled, f"{n}_w1"], [f"{n}_h"], name=f"ffn{i}_SideMatMul1"),
            helper.make_node(
                "BiasGelu", [f"{n}_h", f"{n}_b1"], [f"{n}_act"], name=f"ffn{i}_SideGelu", domain="com.microsoft"
            ),
            helper.make_node("MatMul", [f"{n}_act", f"{n}_w2"], [f"{n}_out"], name=f"ffn{i}_SideMatMul2"),
        ]
        joined = joint.output[0]
        if not consumers.get(joined):
            raise EmbeddingError(f"feed-forward output {joined} in {src} feeds nothing; cannot quantise")
        for node in consumers[joined]:
            node.input[:] = [f"ffn{i}_joined" if name == joined else name for name in node.input]
        side.append(helper.make_node("Add", [joined, f"ffn{i}_side_out"], [f"ffn{i}_joined"], name=f"ffn{i}_SideAdd"))
        before.setdefault(id(consumers[joined][0]), []).extend(side)
        side_matmuls += [f"ffn{i}_SideMatMul1", f"ffn{i}_SideMatMul2"]

    ordered = []
    for node in graph.node:
        ordered.extend(before.get(id(node), []))
        ordered.append(node)
    del graph.node[:]
    graph.node.extend(ordered)
    onnx.save(model, dest)
    return side_matmuls


# Dynamic int8 variants in the order the build tries them (onnx_backend.build_int8 keeps the
# first that passes its self-check against fp32). Weights per channel, activations uint8 per
# tensor at run time.
# ``s8``: int8 weights everywhere: the fastest kernels (u8s8). Where the CPU has no VNNI (AVX2,
#   AVX-512 without VNNI) they sum products in int16, which saturates; the projection after
#   attention suffers most (its input, the attention context, centres its uint8 zero point near
#   128). Measured on an AMD EPYC with AVX2 only: cosine to fp32 min 0.987 on 600 real chunks.
# ``s8-attn-out-u8``: the same, but the projection after each attention takes uint8 weights
#   (u8u8 kernels widen to int16 before multiplying and cannot saturate).
# ``u8``: uint8 weights everywhere: slower, never saturates.
class Int8Variant(TypedDict):
    weight_type: str  # the name of an onnxruntime QuantType
    u8: tuple[str, ...]  # the node groups given uint8 weights (``attention_output``)


INT8_VARIANTS: dict[str, Int8Variant] = {
    "s8": {"weight_type": "QInt8", "u8": ()},
    "s8-attn-out-u8": {"weight_type": "QInt8", "u8": ("attention_output",)},
    "u8": {"weight_type": "QUInt8", "u8": ()},
}


def attention_output_matmuls(model) -> list[str]:
    """Names of the MatMul nodes that read a fused ``Attention`` node's output."""
    attention_outputs = {n.output[0] for n in model.graph.node if n.op_type == "Attention"}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[0] in attention_outputs]


def quantize_int8(src: str, dest: str, tokenizer, variant: str = "s8") -> None:
    """Dynamic int8 quantisation of a fused fp32 model, outliers tamed first (see module doc)."""
    onnx = _need_onnx()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    options = INT8_VARIANTS[variant]
    tamed, first = dest + ".tamed.onnx", dest + ".s8.onnx"
    common = {
        "per_channel": True,
        # embeddings stay fp32: a lookup costs nothing, and int8 tables cost accuracy
        "op_types_to_quantize": ["MatMul", "Attention"],
        "extra_options": {"DefaultTensorType": onnx.TensorProto.FLOAT},
    }
    try:
        keep_fp32 = tame_ffn_outliers(src, tamed, tokenizer)
        as_u8 = attention_output_matmuls(onnx.load(tamed)) if "attention_output" in options["u8"] else []
        with _quiet():
            quantize_dynamic(
                tamed,
                first if as_u8 else dest,
                weight_type=getattr(QuantType, options["weight_type"]),
                nodes_to_exclude=keep_fp32 + as_u8,
                **common,
            )
            if as_u8:
                # a second pass over what the first left in fp32: only the named nodes
                # (quantised nodes are no longer MatMul, and the side paths stay excluded)
                quantize_dynamic(first, dest, weight_type=QuantType.QUInt8, nodes_to_exclude=keep_fp32, **common)
        drop_attention_mask(dest)
    finally:
        for leftover in (tamed, first):
            if os.path.exists(leftover):
                os.remove(leftover)


# Where each attention kernel takes its (optional) mask: the input's position.
MASK_INPUT = {"Attention": 3, "QAttention": 5}


def drop_attention_mask(path: str) -> int:
    """Cut the mask input of every attention node of the model at ``path``; returns how many.

    The backend never pads (:func:`~quarry.ingest.embedders.onnx_backend.same_length_batches`:
    every row of a batch has the same length), so every mask is all ones, and the attention
    kernel is 4-5% faster over the whole model without one (``bench/embed_ops.py``, the ``no
    mask`` row). The graph keeps its ``attention_mask`` input, unread. The fp32 model keeps its
    masks: the outlier calibration (:func:`channel_max`) runs it on padded batches."""
    onnx = _need_onnx()
    model = onnx.load(path)
    cut = 0
    for node in model.graph.node:
        mask_at = MASK_INPUT.get(node.op_type)
        if mask_at is not None and len(node.input) > mask_at and node.input[mask_at]:
            node.input[mask_at] = ""  # an optional input, left empty
            cut += 1
    if cut:
        onnx.save(model, path)
    return cut


class _quiet:
    """Silence the optimizer's and quantizer's advisory log lines and warnings."""

    def __enter__(self):
        self._level = logging.root.manager.disable
        logging.disable(logging.WARNING)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        self._warnings.__exit__(*exc)
        logging.disable(self._level)
        return False
