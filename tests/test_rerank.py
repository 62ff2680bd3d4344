"""Reranking: a real (tiny, locally built) cross-encoder and an LLM listwise rerank against a
scripted OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest
from fakeopenai import FakeOpenAI
from test_windows import hit

from quarry.core.errors import QuarryError, UsageError
from quarry.core.openai.retry import RetryPolicy
from quarry.search.rerank import (
    CrossEncoderReranker,
    LLMReranker,
    build_prompt,
    get_reranker,
    parse_ranking,
)

WORDS = "the a how to roll back deploy release expenses policy travel receipts table cat dog garden tea".split()


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised one-layer BERT cross-encoder with a 22-word vocabulary, saved the way
    sentence-transformers expects a local model folder."""
    pytest.importorskip("sentence_transformers")
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("cross-encoder")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
    ).save_pretrained(folder)
    import torch

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def candidates():
    texts = [
        "how to roll back a deploy",
        "travel expenses policy",
        "cat and dog in the garden",
        "receipts table for travel",
        "tea",
    ]
    out = []
    for i, text in enumerate(texts, start=1):
        r = hit(f"d{i}:0", i, score=1.0 / (60 + i))
        r.text, r.header, r.fused = text, "the release", 1.0 / (60 + i)
        r.scores, r.ranks = {"vector": 0.5, "bm25": None}, {"vector": i, "bm25": None}
        out.append(r)
    return out


# --- factory ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        ("bogus", "unknown reranker 'bogus'"),
        ("cross-encoder", "needs a local model folder"),
        ("cross-encoder:/no/such/model", "no cross-encoder model at /no/such/model"),
        ("", "unknown reranker"),
    ],
)
def test_bad_specs_are_usage_errors(spec, message):
    with pytest.raises(UsageError, match=message):
        get_reranker(spec)


def test_llm_needs_an_endpoint_or_a_key(monkeypatch):
    for name in ("QUARRY_LLM_BASE_URL", "QUARRY_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UsageError, match="QUARRY_LLM_BASE_URL"):
        get_reranker("llm")


def test_llm_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("QUARRY_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("QUARRY_LLM_MODEL", "local-model")
    monkeypatch.delenv("QUARRY_LLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    r = get_reranker("llm")
    assert (r.base_url, r.model, r.api_key) == ("http://127.0.0.1:9/v1", "local-model", "sk-fallback")
    assert get_reranker("llm:other").model == "other"


# --- cross-encoder ---------------------------------------------------------------------------


@pytest.mark.torch
def test_cross_encoder_orders_by_the_models_own_scores(tiny_cross_encoder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from sentence_transformers import CrossEncoder

    reranker = get_reranker(f"cross-encoder:{tiny_cross_encoder}")
    assert isinstance(reranker, CrossEncoderReranker)
    results = candidates()
    out = reranker.rerank("roll back a deploy", results)

    expected = CrossEncoder(str(tiny_cross_encoder), local_files_only=True, device="cpu").predict(
        [("roll back a deploy", f"{r.header}\n\n{r.text}") for r in results]
    )
    by_id = {r.chunk_id: float(s) for r, s in zip(results, expected)}
    assert [r.rank for r in out] == [1, 2, 3, 4, 5]
    assert [r.scores["rerank"] for r in out] == pytest.approx(sorted(by_id.values(), reverse=True))
    assert all(r.scores["rerank"] == pytest.approx(by_id[r.chunk_id]) == pytest.approx(r.score) for r in out)
    assert all(0.0 <= r.score <= 1.0 for r in out)
    assert [r.ranks["rerank"] for r in out] == [1, 2, 3, 4, 5]
    # the fused score and the retrievers' evidence survive
    assert {r.chunk_id: r.fused for r in out} == {r.chunk_id: r.fused for r in results}
    assert all(r.scores["vector"] == 0.5 for r in out)
    # inputs are not modified
    assert [r.rank for r in results] == [1, 2, 3, 4, 5] and "rerank" not in results[0].scores


def test_cross_encoder_without_torch_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "sentence_transformers", None)  # import fails
    (tmp_path / "config.json").write_text("{}")
    reranker = get_reranker(f"cross-encoder:{tmp_path}")
    with pytest.raises(QuarryError, match=r"pip install 'quarry\[torch\]'"):
        reranker.rerank("q", candidates())


@pytest.mark.torch
def test_cross_encoder_with_a_broken_folder_is_one_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    reranker = get_reranker(f"cross-encoder:{tmp_path}")
    with pytest.raises(QuarryError, match="could not load the cross-encoder"):
        reranker.rerank("q", candidates())


# --- LLM listwise ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, n, order, repaired",
    [
        ('{"ranking": [3, 1, 2]}', 3, [2, 0, 1], False),
        ("[2, 1]", 2, [1, 0], False),
        ('{"ranking": ["[2]", "passage 3", "1"]}', 3, [1, 2, 0], False),
        ('{"ranking": [{"id": 2}, {"id": 1}]}', 2, [1, 0], False),
        ('{"order": [2, 1, 3]}', 3, [1, 0, 2], False),  # any list inside the object
        ('{"ranking": [2, 9, 2, 0]}', 3, [1, 0, 2], True),  # unknown and repeated dropped, rest appended
        ('{"ranking": [3]}', 4, [2, 0, 1, 3], True),
        ("Sure! Most relevant: 2, then 3.", 3, [1, 2, 0], True),
        ('```json\n{"ranking": [2, 1]}\n```', 2, [1, 0], False),
        ("nothing useful", 3, [0, 1, 2], True),
    ],
)
def test_parse_ranking_repairs(content, n, order, repaired):
    assert parse_ranking(content, n) == (order, repaired)


def test_prompt_numbers_every_passage_and_bounds_length():
    results = candidates()
    results[1].text = "word " * 1000
    prompt = build_prompt("roll back", results, passage_chars=200)
    assert prompt.startswith("Query: roll back")
    for i in range(1, 6):
        assert f"[{i}] the release" in prompt
    assert max(len(line) for line in prompt.splitlines()) <= 210


@pytest.fixture
def server():
    with FakeOpenAI() as srv:
        yield srv


def llm(server, **kwargs) -> LLMReranker:
    return LLMReranker(
        model="fake-chat",
        base_url=server.base_url,
        api_key="sk-test-secret",
        policy=RetryPolicy(attempts=3, base=0.01, cap=0.02),
        **kwargs,
    )


def test_llm_rerank_follows_the_models_ranking(server):
    server.chat_handler = lambda request: {"ranking": [4, 2, 5, 1, 3]}
    out = llm(server).rerank("travel receipts", candidates())
    assert [r.chunk_id for r in out] == ["d4:0", "d2:0", "d5:0", "d1:0", "d3:0"]
    assert [r.rank for r in out] == [1, 2, 3, 4, 5]
    assert [r.scores["rerank"] for r in out] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2])
    (request,) = server.calls_to("/v1/chat/completions")
    body = request.json
    assert body["model"] == "fake-chat" and body["response_format"] == {"type": "json_object"}
    assert "[4] the release receipts table for travel" in body["messages"][-1]["content"]
    assert "Query: travel receipts" in body["messages"][-1]["content"]


def test_llm_rerank_repairs_a_sloppy_answer(server):
    server.chat_handler = lambda request: '{"ranking": [3, 3, 17, "2"]}'
    reranker = llm(server)
    out = reranker.rerank("q", candidates())
    assert [r.chunk_id for r in out] == ["d3:0", "d2:0", "d1:0", "d4:0", "d5:0"]
    assert reranker.repairs == 1


def test_llm_rerank_retries_server_errors(server):
    server.chat_handler = lambda request: {"ranking": [2, 1, 3, 4, 5]}
    server.fail_next(2, status=503)
    out = llm(server).rerank("q", candidates())
    assert out[0].chunk_id == "d2:0" and server.calls == 3


def test_llm_rerank_failure_is_one_line_without_the_key(server):
    server.api_key = "the-right-key"
    with pytest.raises(QuarryError) as info:
        llm(server).rerank("q", candidates())
    message = str(info.value)
    assert "HTTP 401" in message and "sk-test-secret" not in message
    assert server.calls == 1  # authentication errors are never retried


def test_llm_rerank_of_one_result_makes_no_call(server):
    out = llm(server).rerank("q", candidates()[:1])
    assert out[0].scores["rerank"] == 1.0 and server.calls == 0


def test_llm_request_is_valid_json_for_any_text(server):
    seen = []
    server.chat_handler = lambda request: seen.append(request) or "[1]"
    results = candidates()
    results[0].text = 'quotes " and \\ backslashes \n newlines'
    llm(server).rerank('query "with" quotes', results)
    assert json.dumps(seen[0])  # the server parsed it as JSON
