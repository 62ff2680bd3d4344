"""Write a BERT encoder as an ONNX graph straight from its safetensors weights, without torch.

The ``onnx`` and ``onnx-int8`` backends used to trace the model with torch once; that made
torch (and its 1.2 GB chain) a dependency of the default install for a one-off step. A BERT
encoder is a short, fixed list of operators, so this module writes that list with
``onnx.helper`` and fills it with the weights read by ``safetensors.numpy``: no torch, no
transformers, and the same graph on every machine.

The graph is the classic BERT export that onnxruntime's transformer optimizer recognises
(:func:`quarry.ingest.embedders.onnx_export.fuse` folds each layer's attention into one ``Attention``
kernel and bias + GELU into ``BiasGelu``): scores divided by sqrt(head size), the mask added as
``(1 - mask) * -10000``, keys transposed with ``perm=[0, 2, 3, 1]``, GELU in its erf form.

Everything sized is read from the model's ``config.json``; what this writer cannot express
(another position embedding type, another activation, another architecture) is refused with
an :class:`~quarry.core.errors.EmbeddingError` naming the file.

Inputs ``input_ids`` and ``attention_mask`` (int64, batch x tokens); output
``last_hidden_state`` (float32, batch x tokens x hidden). Pooling and normalisation happen in
numpy, as for the torch-exported model this replaces.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from quarry.core.errors import EmbeddingError

OPSET = 17


@dataclass(frozen=True)
class BertConfig:
    """The fields of a Hugging Face ``config.json`` that shape a BERT encoder graph."""

    hidden_size: int
    num_heads: int
    num_layers: int
    intermediate_size: int
    layer_norm_eps: float
    max_positions: int

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


def read_config(model_path: str) -> BertConfig:
    """The BERT shape of the model at ``model_path``; refuses what the graph writer cannot build."""
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read the model config {path}: {exc}") from exc
    unsupported = []
    if raw.get("model_type") != "bert":
        unsupported.append(f"model_type {raw.get('model_type')!r} (only 'bert')")
    if raw.get("hidden_act", "gelu") != "gelu":
        unsupported.append(f"hidden_act {raw.get('hidden_act')!r} (only 'gelu')")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        unsupported.append(f"position_embedding_type {raw.get('position_embedding_type')!r} (only 'absolute')")
    try:
        config = BertConfig(
            hidden_size=int(raw["hidden_size"]),
            num_heads=int(raw["num_attention_heads"]),
            num_layers=int(raw["num_hidden_layers"]),
            intermediate_size=int(raw["intermediate_size"]),
            layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
            max_positions=int(raw["max_position_embeddings"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise EmbeddingError(f"{path} lacks a BERT field or has a bad value: {exc}") from exc
    if config.hidden_size % config.num_heads:
        unsupported.append(f"hidden_size {config.hidden_size} not divisible by {config.num_heads} heads")
    if unsupported:
        raise EmbeddingError(f"cannot build an ONNX graph for {path}: unsupported {'; '.join(unsupported)}")
    return config


def read_weights(model_path: str) -> dict[str, np.ndarray]:
    """The model's tensors as float32 numpy arrays, names without a ``bert.`` prefix."""
    path = os.path.join(model_path, "model.safetensors")
    try:
        from safetensors.numpy import load_file
    except ImportError as exc:
        raise EmbeddingError("building the ONNX model needs the safetensors package: pip install safetensors") from exc
    try:
        tensors = load_file(path)
    except Exception as exc:  # a missing, truncated or foreign file; safetensors raises several types
        raise EmbeddingError(f"cannot read the model weights {path}: {exc}") from exc
    return {name.removeprefix("bert."): array for name, array in tensors.items()}


def build_graph(model_path: str):
    """The encoder of the BERT model at ``model_path`` as an ``onnx.ModelProto``."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as exc:
        raise EmbeddingError("building the ONNX model needs the onnx package: pip install onnx") from exc

    config = read_config(model_path)
    weights = read_weights(model_path)
    nodes: list = []
    inits: list = []

    def tensor(name: str) -> np.ndarray:
        if name not in weights:
            raise EmbeddingError(f"{os.path.join(model_path, 'model.safetensors')} has no tensor {name!r}")
        return weights[name]

    def const(name: str, array) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def dense(x: str, prefix: str, name: str) -> str:
        # torch's Linear stores (out, in); MatMul wants (in, out)
        w = const(f"{prefix}.weight_t", np.ascontiguousarray(tensor(f"{prefix}.weight").T.astype(np.float32)))
        b = const(f"{prefix}.bias", tensor(f"{prefix}.bias").astype(np.float32))
        return node("Add", [node("MatMul", [x, w], f"{name}_matmul"), b], f"{name}_add")

    def layer_norm(x: str, prefix: str, name: str) -> str:
        g = const(f"{prefix}.weight", tensor(f"{prefix}.weight").astype(np.float32))
        b = const(f"{prefix}.bias", tensor(f"{prefix}.bias").astype(np.float32))
        return node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=config.layer_norm_eps)

    hidden, heads, head = config.hidden_size, config.num_heads, config.head_size

    # embeddings: words + positions 0..n-1 + token type 0 (quarry encodes one segment)
    word_table = const("embeddings.word_embeddings.weight", tensor("embeddings.word_embeddings.weight"))
    words = node("Gather", [word_table, "input_ids"], "word_embeddings")
    seq_len = node(
        "Gather", [node("Shape", ["input_ids"], "input_shape"), const("one_i64", np.array(1, np.int64))], "seq_len"
    )
    positions = node("Range", [const("zero_i64", np.array(0, np.int64)), seq_len, "one_i64"], "positions")
    position_table = tensor("embeddings.position_embeddings.weight")[: config.max_positions]
    pos = node(
        "Gather", [const("embeddings.position_embeddings.weight", position_table), positions], "position_embeddings"
    )
    token_type = const("embeddings.token_type_0", tensor("embeddings.token_type_embeddings.weight")[0])
    summed = node("Add", [node("Add", [words, pos], "embeddings_add"), token_type], "embeddings_sum")
    x = layer_norm(summed, "embeddings.LayerNorm", "embeddings_layernorm")

    # additive mask (batch, 1, 1, tokens): 0 where attended, -10000 at padding
    mask = node("Unsqueeze", ["attention_mask", const("axis1", np.array([1], np.int64))], "mask_unsqueeze1")
    mask = node("Unsqueeze", [mask, const("axis2", np.array([2], np.int64))], "mask_unsqueeze2")
    mask = node("Cast", [mask], "mask_cast", to=TensorProto.FLOAT)
    mask = node("Sub", [const("one_f32", np.array(1.0, np.float32)), mask], "mask_invert")
    mask = node("Mul", [mask, const("mask_fill", np.array(-10000.0, np.float32))], "mask_additive")

    split_heads = const("split_heads_shape", np.array([0, 0, heads, head], np.int64))
    merge_heads = const("merge_heads_shape", np.array([0, 0, hidden], np.int64))
    scale = const("attention_scale", np.array(math.sqrt(head), np.float32))
    sqrt2 = const("sqrt2", np.array(math.sqrt(2.0), np.float32))
    half = const("half", np.array(0.5, np.float32))

    for i in range(config.num_layers):
        p, n = f"encoder.layer.{i}", f"layer{i}"
        q = node(
            "Transpose",
            [node("Reshape", [dense(x, f"{p}.attention.self.query", f"{n}_q"), split_heads], f"{n}_q_heads")],
            f"{n}_q_t",
            perm=[0, 2, 1, 3],
        )
        k = node(
            "Transpose",
            [node("Reshape", [dense(x, f"{p}.attention.self.key", f"{n}_k"), split_heads], f"{n}_k_heads")],
            f"{n}_k_t",
            perm=[0, 2, 3, 1],
        )
        v = node(
            "Transpose",
            [node("Reshape", [dense(x, f"{p}.attention.self.value", f"{n}_v"), split_heads], f"{n}_v_heads")],
            f"{n}_v_t",
            perm=[0, 2, 1, 3],
        )
        scores = node("Div", [node("MatMul", [q, k], f"{n}_scores"), scale], f"{n}_scores_scaled")
        probs = node("Softmax", [node("Add", [scores, mask], f"{n}_scores_masked")], f"{n}_probs", axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v], f"{n}_context")], f"{n}_context_t", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge_heads], f"{n}_context_merged")
        attended = dense(context, f"{p}.attention.output.dense", f"{n}_attn_out")
        x = layer_norm(
            node("Add", [attended, x], f"{n}_attn_residual"), f"{p}.attention.output.LayerNorm", f"{n}_attn_layernorm"
        )
        up = dense(x, f"{p}.intermediate.dense", f"{n}_ffn_up")
        # exact GELU: x * 0.5 * (1 + erf(x / sqrt(2)))
        erf = node(
            "Add",
            [node("Erf", [node("Div", [up, sqrt2], f"{n}_gelu_div")], f"{n}_gelu_erf"), "one_f32"],
            f"{n}_gelu_add",
        )
        gelu = node("Mul", [node("Mul", [up, erf], f"{n}_gelu_mul"), half], f"{n}_gelu")
        down = dense(gelu, f"{p}.output.dense", f"{n}_ffn_down")
        x = layer_norm(node("Add", [down, x], f"{n}_ffn_residual"), f"{p}.output.LayerNorm", f"{n}_ffn_layernorm")

    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
    axes = ["batch", "tokens"]
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, axes),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, axes),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*axes, hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="quarry")
    model.ir_version = min(model.ir_version, 8)  # readable by every onnxruntime quarry supports
    onnx.checker.check_model(model)
    return model


def write_graph(model_path: str, dest: str) -> None:
    """Write the encoder of the model at ``model_path`` to ``dest`` (see :func:`build_graph`)."""
    import onnx

    onnx.save(build_graph(model_path), dest)
