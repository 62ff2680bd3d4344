"""The local all-MiniLM-L6-v2 backends: torch (reference), onnx (fp32) and onnx-int8.

Tests marked ``slow`` load the real model; the ONNX ones build it once per session into a
temporary cache directory, without torch. Tests marked ``torch`` compare with the
sentence-transformers reference and run from .venv-torch (``make test-torch``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from quarry.core.errors import ConfigError
from quarry.ingest.embedders.base import Embedder
from quarry.ingest.embedders.local import MAX_TOKENS, TorchEmbedder, bundled_model_path, get_local_embedder

SENTENCES = [
    "How do I roll back a failed deployment to the previous release?",
    "The on-call engineer triages incoming incidents and escalates outages.",
    "Quarterly revenue grew by twelve percent, driven by enterprise customers.",
    "Install the command-line tool with pip and run the index command on a folder.",
    "She walked along the river at dawn, listening to the birds.",
    "Our hiring process has four stages: screen, technical interview, team chat, offer.",
]
LONG_TEXT = " ".join(
    f"Section {i} explains how the indexer splits documents into chunks and embeds them." for i in range(60)
)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1)


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("onnx-cache"))


@pytest.fixture(scope="session")
def embedders(onnx_cache):
    """One embedder per backend, shared by the session (the ONNX build runs once); loaded lazily,
    so the torch one costs nothing where torch is absent."""
    built = {}
    for backend in ("torch", "onnx", "onnx-int8"):
        kw = {} if backend == "torch" else {"cache_dir": onnx_cache}
        built[backend] = get_local_embedder(backend, **kw)
    return built


@pytest.fixture(scope="session")
def reference(embedders):
    return embedders["torch"].embed(SENTENCES + [LONG_TEXT])


ALL_BACKENDS = [pytest.param("torch", marks=pytest.mark.torch), "onnx", "onnx-int8"]


def test_bundled_model_path_is_a_sentence_transformers_directory():
    path = bundled_model_path()
    assert isinstance(path, str)
    for name in ("tokenizer.json", "config.json", "modules.json"):
        assert os.path.exists(os.path.join(path, name))


def test_construction_and_counting_load_no_model():
    embedder = TorchEmbedder()
    assert embedder.count_tokens(["hello world"]) == [4]  # [CLS] hello world [SEP]
    assert embedder._st is None
    assert (embedder.model, embedder.dim, embedder.max_tokens, embedder.backend) == (
        "all-MiniLM-L6-v2",
        384,
        256,
        "torch",
    )
    assert isinstance(embedder, Embedder)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 2), ("hello world", 4), ("Hello, world!", 6)],
)
def test_count_tokens_includes_cls_and_sep(text, expected):
    assert TorchEmbedder().count_tokens([text]) == [expected]


def test_count_tokens_reports_what_truncation_would_drop():
    (count,) = TorchEmbedder().count_tokens([LONG_TEXT])
    assert count > MAX_TOKENS
    assert TorchEmbedder().count_tokens([]) == []


@pytest.mark.slow
@pytest.mark.torch
def test_count_tokens_matches_the_sentence_transformers_tokenizer(embedders):
    torch_embedder = embedders["torch"]
    torch_embedder.load()
    tokenizer = torch_embedder._st.tokenizer
    texts = SENTENCES + ["unbelievably", "Größe über 3.5 MB!", LONG_TEXT]
    expected = [len(tokenizer(t)["input_ids"]) for t in texts]
    assert torch_embedder.count_tokens(texts) == expected


def test_unknown_backend_names_the_choices():
    with pytest.raises(ConfigError, match="onnx-int8"):
        get_local_embedder("tensorflow")


def test_onnx_backend_names():
    from quarry.ingest.embedders.onnx_backend import OnnxEmbedder

    fp32, int8 = OnnxEmbedder(), OnnxEmbedder(quantize=True)
    assert (fp32.backend, int8.backend) == ("onnx", "onnx-int8")
    assert fp32.model == int8.model == "all-MiniLM-L6-v2"
    assert fp32.dim == int8.dim == 384
    assert fp32._session is None  # constructing loads nothing


@pytest.mark.parametrize(
    ("lengths", "budget", "max_items", "expected"),
    [
        ([3, 5, 3, 3, 5], 100, 64, [[0, 2, 3], [1, 4]]),  # grouped by exact length
        ([3, 3, 3, 3], 6, 64, [[0, 1], [2, 3]]),  # the token budget cuts a group
        ([3, 3, 3], 100, 2, [[0, 1], [2]]),  # so does max_items
        ([300, 300], 256, 64, [[0], [1]]),  # a text over budget gets its own batch
        ([], 100, 64, []),
    ],
)
def test_same_length_batches(lengths, budget, max_items, expected):
    from quarry.ingest.embedders.onnx_backend import same_length_batches

    batches = same_length_batches(np.array(lengths, dtype=np.int64), budget, max_items)
    assert [b.tolist() for b in batches] == expected


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_vectors_are_unit_float32_of_dim_384(embedders, backend):
    vectors = embedders[backend].embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedders[backend].embed([]).shape == (0, 384)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(("backend", "floor"), [("onnx", 0.9999), ("onnx-int8", 0.99)])
def test_onnx_vectors_match_torch(embedders, reference, backend, floor):
    """The graph written from the safetensors weights (no torch) is the model torch runs."""
    vectors = embedders[backend].embed(SENTENCES + [LONG_TEXT])
    assert cosines(vectors, reference).min() >= floor


@pytest.mark.slow
@pytest.mark.torch
def test_written_graph_matches_the_torch_model_token_by_token(embedders):
    """Every token's output, padding included, not only the pooled vector."""
    import torch
    from transformers import AutoModel

    from quarry.ingest.embedders.local import load_tokenizer
    from quarry.ingest.embedders.onnx_export import pad_batch

    embedders["onnx"].load()
    tokenizer = load_tokenizer(bundled_model_path())
    ids, mask = pad_batch(tokenizer.encode_batch(SENTENCES + [LONG_TEXT]))
    model = AutoModel.from_pretrained(bundled_model_path(), local_files_only=True).eval()
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    import onnxruntime as ort

    session = ort.InferenceSession(embedders["onnx"].onnx_path, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    keep = mask.astype(bool)
    a, b = got[keep], expected.numpy()[keep]
    token_cosines = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert token_cosines.min() >= 0.9999


def test_drop_attention_mask_empties_the_mask_input_of_attention_nodes_only(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from quarry.ingest.embedders.onnx_export import drop_attention_mask

    nodes = [
        helper.make_node("ReduceSum", ["attention_mask"], ["mask_index"]),
        helper.make_node(
            "QAttention", ["x", "w", "b", "s", "ws", "mask_index", "xz", "wz"], ["q"], domain="com.microsoft"
        ),
        helper.make_node("Attention", ["q", "w2", "b2", "mask_index"], ["y"], domain="com.microsoft"),
        helper.make_node("Attention", ["y", "w3", "b3"], ["z"], domain="com.microsoft"),  # none to cut
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph), path)
    assert drop_attention_mask(path) == 2
    got = [list(n.input) for n in onnx.load(path).graph.node]
    assert got[0] == ["attention_mask"]
    assert got[1] == ["x", "w", "b", "s", "ws", "", "xz", "wz"]
    assert got[2] == ["q", "w2", "b2", ""] and got[3] == ["y", "w3", "b3"]
    assert drop_attention_mask(path) == 0  # nothing left to cut


@pytest.mark.slow
def test_int8_stays_close_to_fp32_and_records_its_variant(embedders):
    """The build's self-check holds on texts it did not see, and the variant is on record."""
    from quarry.ingest.embedders.onnx_backend import INT8_MIN_COSINE, build_info

    int8, fp32 = embedders["onnx-int8"], embedders["onnx"]
    texts = SENTENCES + [LONG_TEXT, "undo a broken release", "Q3 revenue", "E11000 duplicate key error"]
    assert cosines(int8.embed(texts), fp32.embed(texts)).min() >= INT8_MIN_COSINE
    info = build_info(int8.onnx_path)
    from quarry.ingest.embedders.onnx_export import INT8_VARIANTS

    assert info["variant"] in (*INT8_VARIANTS, "fp32")
    if info["variant"] != "fp32":
        assert info["self_check"]["cosine_min"] >= INT8_MIN_COSINE
    assert [t["variant"] for t in info["tried"]][-1] == info["variant"] or info["variant"] == "fp32"
    assert build_info(fp32.onnx_path)["fused"]["Attention"] == 6  # the optimizer fused every layer
    import onnx

    from quarry.ingest.embedders.onnx_export import MASK_INPUT

    # the int8 model reads no attention mask (its batches are never padded); the fp32 one does
    masks = {
        e.backend: [
            n.input[MASK_INPUT[n.op_type]] for n in onnx.load(e.onnx_path).graph.node if n.op_type in MASK_INPUT
        ]
        for e in (int8, fp32)
    }
    assert len(masks["onnx-int8"]) == 6 and not any(masks["onnx-int8"])
    assert len(masks["onnx"]) == 6 and all(masks["onnx"])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_paraphrase_is_closer_than_an_unrelated_sentence(embedders, backend):
    query, paraphrase, unrelated = embedders[backend].embed(
        [
            "How can I undo a broken release?",
            "Steps to roll back a deployment that failed",
            "The recipe needs two cups of flour and an egg.",
        ]
    )
    assert query @ paraphrase > query @ unrelated + 0.2


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_long_text_is_truncated_not_rejected(embedders, backend):
    embedder = embedders[backend]
    long_vec, prefix_vec = embedder.embed([LONG_TEXT, LONG_TEXT + " and much more text at the end"])
    # both are cut at 256 tokens, so the tail that differs is never seen
    assert long_vec @ prefix_vec > 0.9999


@pytest.mark.slow
def test_batching_does_not_change_fp32_vectors(embedders):
    onnx = embedders["onnx"]
    together = onnx.embed(SENTENCES)
    alone = np.vstack([onnx.embed([s]) for s in SENTENCES])
    assert cosines(together, alone).min() > 0.99999


@pytest.mark.slow
def test_onnx_counts_its_sub_batches_as_model_calls(embedders):
    from quarry.ingest.embedders.onnx_backend import same_length_batches

    onnx = embedders["onnx-int8"]
    texts = [" ".join(["word"] * n) for n in range(1, 120)]
    onnx.load()
    lengths = np.array([len(e.ids) for e in onnx._tokenizer.encode_batch(texts)])
    before = onnx.calls
    onnx.embed(texts)
    assert onnx.calls - before == len(same_length_batches(lengths, onnx.batch_tokens, onnx.max_batch)) > 1


@pytest.mark.slow
def test_onnx_cache_is_reused_not_rebuilt(embedders, onnx_cache):
    from quarry.ingest.embedders.onnx_backend import OnnxEmbedder

    for quantize in (False, True):
        first = embedders["onnx-int8" if quantize else "onnx"]
        first.load()
        stamp = os.stat(first.onnx_path).st_mtime_ns
        again = OnnxEmbedder(quantize=quantize, cache_dir=onnx_cache)
        again.load()
        assert again.onnx_path == first.onnx_path
        assert again.export_seconds == 0.0
        assert os.stat(again.onnx_path).st_mtime_ns == stamp
    leftovers = [name for name in os.listdir(onnx_cache) if not name.endswith((".onnx", ".onnx.json"))]
    assert leftovers == []  # no half-written files or build folders


@pytest.mark.slow
def test_cached_onnx_embeds_without_torch(embedders, onnx_cache):
    embedders["onnx-int8"].load()  # make sure both files exist
    embedders["onnx"].load()
    script = (
        "import sys\n"
        "from quarry.ingest.embedders.local import get_local_embedder\n"
        "for backend in ('onnx', 'onnx-int8'):\n"
        "    e = get_local_embedder(backend)\n"
        "    v = e.embed(['a sentence to embed'])\n"
        "    assert v.shape == (1, 384) and e.export_seconds == 0.0, backend\n"
        "loaded = [m for m in ('torch', 'transformers', 'sentence_transformers', 'onnx') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = dict(os.environ, QUARRY_CACHE_DIR=onnx_cache)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_default_backend_builds_its_model_from_an_empty_cache_without_torch(tmp_path):
    """What a fresh install does: QUARRY_CACHE_DIR empty, torch unimportable even if installed."""
    script = (
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'sentence_transformers'):\n"
        "            raise ImportError(f'{name} is blocked in this test')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "from quarry.ingest.embedders import get_embedder, describe_backend\n"
        "from quarry.core.settings import Settings\n"
        "settings = Settings.from_env()\n"
        "assert settings.embed_backend == 'onnx-int8', settings.embed_backend\n"
        "e = get_embedder(settings)\n"
        "v = e.embed(['how do I roll back a deploy'])\n"
        "assert v.shape == (1, 384) and e.export_seconds > 0, e.export_seconds\n"
        "print(describe_backend(settings)['variant'])\n"
    )
    cache = tmp_path / "empty-cache"
    env = {k: v for k, v in os.environ.items() if k != "QUARRY_EMBED_BACKEND"}
    env["QUARRY_CACHE_DIR"] = str(cache)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    from quarry.ingest.embedders.onnx_export import INT8_VARIANTS

    assert done.stdout.strip() in (*INT8_VARIANTS, "fp32")
    built = sorted(p.name for p in cache.iterdir())
    assert any("int8" in name and name.endswith(".onnx") for name in built), built
    assert any(name.endswith(".onnx.json") for name in built), built
