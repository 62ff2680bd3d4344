"""Where the int8 model's time goes, and what changing the graph or the batches buys, in one run.

    python bench/embed_ops.py                # 1,500 chunks; tables on stdout
    python bench/embed_ops.py --chunks 600 --json

Chunks are bench/embed.py's (handbook Markdown and sample PDFs cut at ~800 characters), embedded
as quarry embeds them (markup left out, ``quarry.core.models.without_markup``). Three tables:

1. **Operators**: onnxruntime's own profile of the ``onnx-int8`` model the backend builds, one
   chunk per run on one thread, seconds and share per operator type.
2. **Graph variants**, each timed on the same chunks on one thread (best of ``--rounds``
   alternated rounds) with its cosine to the fp32 model: the model as shipped; the erf GELU
   replaced by the tanh form (FastGelu) and by x·sigmoid(1.702x) (QuickGelu); and, for a model
   built before export version 4 (``--model``), without its attention mask input, which quarry's
   int8 models have dropped since (the backend never pads). A variant is only worth shipping if
   it is faster and keeps cosine >= 0.99 (the backend's self-check bar). Other runtimes in the
   same table: the fp32 model with *static* int8 activations (onnxruntime's ``quantize_static``, QDQ
   MatMuls, per-channel weights, activation ranges calibrated on 100 of the chunks; its graph
   pass needs ``sympy``) and, when
   ``openvino`` is installed in the venv (``pip install openvino nncf``; quarry does not depend on
   it), OpenVINO's CPU plugin on the fp32 model and on int8 weights with dynamic int8 activations.
3. **Batches**: ``OnnxEmbedder`` as the flow runs it (one session, a batch per CPU side by side)
   with each ``batch_tokens`` budget, tokens per second.

Writes bench/results/embed_ops.json.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import tempfile
import time

from common import RESULTS, load_avg, log, machine, table, write_json

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np


def session(path: str, profile_to: str | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if profile_to:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(profile_to, "ort")
    return ort.InferenceSession(
        path, options, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"]
    )


def embed_one_by_one(sess, encodings: list[np.ndarray]) -> np.ndarray:
    out = np.zeros((len(encodings), 384), dtype=np.float32)
    for row, ids in enumerate(encodings):
        (hidden,) = sess.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        out[row] = hidden[0].mean(axis=0)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def operators(path: str, encodings: list[np.ndarray]) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="embed-ops-") as work:
        sess = session(path, profile_to=work)
        embed_one_by_one(sess, encodings)
        with open(sess.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    spent: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            spent[event["args"]["op_name"]] += event["dur"]
    total = sum(spent.values())
    return [{"op": op, "s": us / 1e6, "share": us / total} for op, us in spent.most_common()]


def static_int8(fp32: str, work: str, encodings: list[np.ndarray]) -> str:
    """The fp32 model with static int8 activations (QDQ MatMuls, MinMax ranges from 100 chunks)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Chunks(CalibrationDataReader):
        def __init__(self) -> None:
            self.rest = iter(encodings[:: max(1, len(encodings) // 100)][:100])

        def get_next(self) -> dict | None:
            ids = next(self.rest, None)
            return None if ids is None else {"input_ids": ids, "attention_mask": np.ones_like(ids)}

    pre, dest = os.path.join(work, "pre.onnx"), os.path.join(work, "static.onnx")
    quant_pre_process(fp32, pre)  # its symbolic shape pass needs sympy
    quantize_static(
        pre,
        dest,
        Chunks(),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul"],
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    return dest


def openvino_runners(fp32: str) -> dict:
    """OpenVINO's CPU plugin on one thread, when installed: the fp32 model, and int8 weights (nncf)
    with the plugin's dynamic int8 activations. Empty when ``openvino`` is not importable."""
    try:
        import openvino as ov
    except ImportError:
        return {}
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}

    def runner(model, extra: dict | None = None):
        compiled = core.compile_model(model, "CPU", {**config, **(extra or {})})
        request = compiled.create_infer_request()

        def run(encodings: list[np.ndarray]) -> np.ndarray:
            out = np.zeros((len(encodings), 384), dtype=np.float32)
            for row, ids in enumerate(encodings):
                hidden = request.infer({"input_ids": ids, "attention_mask": np.ones_like(ids)})[compiled.outputs[0]]
                out[row] = hidden[0].mean(axis=0)
            return out / np.linalg.norm(out, axis=1, keepdims=True)

        return run

    runners = {"OpenVINO fp32": lambda: runner(core.read_model(fp32))}
    try:
        import nncf
    except ImportError:
        return runners
    weights = nncf.compress_weights(ov.convert_model(fp32), mode=nncf.CompressWeightsMode.INT8_SYM)
    runners["OpenVINO int8 weights, dynamic int8"] = lambda: runner(weights, {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "64"})
    return runners


def variant(src: str, dest: str, gelu: str | None = None) -> str:
    """A copy of ``src`` at ``dest``, its BiasGelu nodes replaced by ``gelu`` when given."""
    import onnx
    from onnx import helper

    model = onnx.load(src)
    nodes = []
    for node in model.graph.node:
        if gelu and node.op_type == "BiasGelu":
            x, bias = node.input
            if gelu == "FastGelu":
                node = helper.make_node("FastGelu", [x, bias], list(node.output), domain="com.microsoft")
            else:
                nodes.append(helper.make_node("Add", [x, bias], [node.output[0] + "_biased"]))
                node = helper.make_node(
                    "QuickGelu", [node.output[0] + "_biased"], list(node.output), domain="com.microsoft", alpha=1.702
                )
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, dest)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budgets", default="256,512,1024,2048")
    ap.add_argument("--skip-batches", action="store_true", help="operators and graph variants only")
    ap.add_argument("--skip-runtimes", action="store_true", help="no static int8 or OpenVINO rows")
    ap.add_argument("--model", help="an int8 .onnx file to profile instead of the one the backend builds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from embed import load_chunks

    from quarry.core.models import without_markup
    from quarry.ingest.embedders.minilm import MAX_TOKENS, bundled_model_path, load_tokenizer
    from quarry.ingest.embedders.onnx_backend import OnnxEmbedder, ensure_model
    from quarry.ingest.embedders.onnx_export import drop_attention_mask

    texts = [without_markup(t) for t in load_chunks(args.chunks)]
    tokenizer = load_tokenizer(bundled_model_path(), MAX_TOKENS)
    encodings = [np.array([e.ids], dtype=np.int64) for e in tokenizer.encode_batch(texts)]
    tokens = sum(ids.shape[1] for ids in encodings)
    probe = OnnxEmbedder(quantize=True)
    probe.load()
    int8 = args.model or probe.onnx_path
    assert int8 is not None
    fp32, _ = ensure_model(probe.cache_dir, False, probe.model_path)
    out: dict = {"machine": machine(), "load": load_avg(), "chunks": len(texts), "tokens": tokens, "model": int8}
    log(f"{len(texts)} chunks, {tokens} tokens; model {os.path.basename(int8)}")

    out["operators"] = operators(int8, encodings)
    print(
        table(["operator", "s", "share"], [[r["op"], f"{r['s']:.3f}", f"{r['share']:.1%}"] for r in out["operators"]])
    )

    reference = embed_one_by_one(session(fp32), encodings)
    with tempfile.TemporaryDirectory(prefix="embed-ops-") as work:
        variants = {
            "as shipped" if not args.model else "as given": int8,
            "FastGelu (tanh)": variant(int8, os.path.join(work, "fast.onnx"), gelu="FastGelu"),
            "QuickGelu": variant(int8, os.path.join(work, "quick.onnx"), gelu="QuickGelu"),
        }
        if drop_attention_mask(variant(int8, os.path.join(work, "nomask.onnx"))):  # a model with masks
            variants["no mask"] = os.path.join(work, "nomask.onnx")
            variants["no mask + FastGelu"] = variant(
                variants["no mask"], os.path.join(work, "both.onnx"), gelu="FastGelu"
            )
        runners = {
            name: (lambda path=path: functools.partial(embed_one_by_one, session(path)))
            for name, path in variants.items()
        }
        if not args.skip_runtimes:
            try:
                static = static_int8(fp32, work, encodings)
                runners["static int8 (QDQ, calibrated)"] = lambda: functools.partial(embed_one_by_one, session(static))
            except ImportError as exc:
                log(f"no static int8 row: {exc}")
            runners.update(openvino_runners(fp32))
        best: dict[str, float] = {}
        cosine: dict[str, np.ndarray] = {}
        for _ in range(args.rounds):
            for name, make in runners.items():
                run = make()
                run(encodings[:8])
                started = time.perf_counter()
                vectors = run(encodings)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - started)
                cosine[name] = np.sum(vectors * reference, axis=1)
    base = best[next(iter(variants))]
    out["variants"] = [
        {
            "variant": name,
            "s": round(best[name], 3),
            "tokens_per_s": round(tokens / best[name]),
            "vs_first": round(best[name] / base, 3),
            "cosine_min": round(float(cosine[name].min()), 4),
            "cosine_mean": round(float(cosine[name].mean()), 5),
        }
        for name in runners
    ]
    print(
        table(
            ["variant (one thread)", "s", "tokens/s", "time vs first", "cosine min", "cosine mean"],
            [
                [r["variant"], r["s"], r["tokens_per_s"], f"{r['vs_first']:.3f}", r["cosine_min"], r["cosine_mean"]]
                for r in out["variants"]
            ],
        )
    )

    out["batches"] = []
    budgets = [] if args.skip_batches else [int(b) for b in args.budgets.split(",")]
    best_b: dict[int, float] = {}
    for _ in range(args.rounds):
        for budget in budgets:
            embedder = OnnxEmbedder(quantize=True, batch_tokens=budget)
            embedder.embed(texts[:16])
            started = time.perf_counter()
            embedder.embed(texts)
            best_b[budget] = min(best_b.get(budget, float("inf")), time.perf_counter() - started)
    for budget in budgets:
        out["batches"].append(
            {"batch_tokens": budget, "s": round(best_b[budget], 3), "tokens_per_s": round(tokens / best_b[budget])}
        )
    if out["batches"]:
        print(
            table(
                ["batch_tokens (threads side by side)", "s", "tokens/s"],
                [[r["batch_tokens"], r["s"], r["tokens_per_s"]] for r in out["batches"]],
            )
        )
    write_json(RESULTS / "embed_ops.json", out)
    if args.json:
        print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
