"""Index.answer against the fake OpenAI-compatible server, which records every prompt: citations
parsed, renumbered and dropped when invented; quotes checked; not_found without a request; retries,
errors and context-length errors bounded; a conversation condensed first; streaming events."""

from __future__ import annotations

import json

import pytest
from fakeopenai import FakeOpenAI
from test_query import DIM, FILLER, commit, doc

import quarry
from quarry.core.settings import Settings
from quarry.search.citations import check, parse_content
from quarry.search.evidence import Passage, content_terms, pack, shares_content_word

DOCS = {
    "build": [
        "The wombat programme ships its builds every Tuesday from the quartz pipeline.",
        f"{FILLER} The quartz pipeline runs the release checks before each build ships.",
    ],
    "picnic": [
        "The wombat programme held its annual picnic by the river in June.",
        f"{FILLER} Everyone brought sandwiches and the wombat team won the tug of war.",
    ],
    "budget": ["The wombat programme spends most of its budget on quartz hardware.", FILLER],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("answer") / "store"
    commit(path, [doc(name, texts) for name, texts in DOCS.items()])
    return path


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def open_with(store, fake, **kw):
    settings = Settings.from_env(
        embed_backend="hash",
        embed_dim=DIM,
        llm_base_url=fake.base_url,
        llm_model="fake-chat",
        llm_api_key="sk-test-secret",
        **kw,
    )
    return quarry.open(store, settings)


def passage(n, text, doc_id="d", chunks=None):
    return Passage(
        number=n,
        doc_id=doc_id,
        path=f"docs/{doc_id}.md",
        title=doc_id,
        section="",
        page_start=None,
        page_end=None,
        first_chunk=0,
        last_chunk=0,
        chunk_ids=chunks or [f"{doc_id}:0"],
        text=text,
    )


# --- checking, without a server -------------------------------------------------------------------


def test_citations_are_renumbered_invented_ones_dropped_and_uncited_sentences_marked():
    passages = [
        passage(1, "Alpha ships on Tuesday."),
        passage(2, "Beta ships on Friday."),
        passage(3, "Gamma never ships."),
    ]
    checked = check("Gamma never ships [3]. Alpha ships on Tuesday [1][7]. Everything else is unknown.", passages)
    assert checked.text == "Gamma never ships [1]. Alpha ships on Tuesday [2]. Everything else is unknown."
    assert [(c.number, c.passage) for c in checked.citations] == [(1, 3), (2, 1)]
    assert checked.dropped == [{"number": 7, "sentence": "Alpha ships on Tuesday."}]
    assert checked.uncited == ["Everything else is unknown."]
    assert [s["uncited"] for s in checked.sentences] == [False, False, True]


@pytest.mark.parametrize(
    "content, cites",
    [
        ("Alpha ships. [1] Beta ships. [2]", [[1], [2]]),  # markers after the full stop
        ("Alpha and beta ship [1, 2].", [[1, 2]]),
        ("Alpha ships [2][2].", [[2]]),
        ('{"status": "answered", "claims": [{"text": "Alpha ships.", "citations": [2, 1]}]}', [[2, 1]]),
        ('{"answer": "Alpha ships.", "citations": [1]}', [[1]]),
        ('```json\n{"answer": "Alpha ships [2]."}\n```', [[2]]),
    ],
)
def test_answer_forms_are_parsed(content, cites):
    claims, not_found = parse_content(content)
    assert not not_found
    assert [c["citations"] for c in claims] == cites


@pytest.mark.parametrize("content", ["NOT_FOUND", "NOT_FOUND.", '{"status": "not_found", "claims": []}'])
def test_not_found_answers(content):
    assert parse_content(content) == ([], True)
    assert check(content, [passage(1, "x")]).not_found


def test_quotes_must_be_in_a_cited_passage():
    passages = [
        passage(1, "The pipeline runs the “release checks” before\neach build ships.", chunks=["d:0", "d:1"]),
        passage(2, "Something else entirely, about budgets."),
    ]
    passages[0].chunk_offsets = [0, 40]
    content = json.dumps(
        {
            "status": "answered",
            "claims": [
                {"text": "Checks run first.", "citations": [1], "quote": 'runs the "release checks" before each build'},
                {"text": "Budgets exist.", "citations": [2], "quote": "budgets are unlimited"},
            ],
        }
    )
    checked = check(content, passages)
    assert [q["found"] for q in checked.quotes] == [True, False]
    assert checked.citations[0].quote_verified and checked.citations[0].quote.startswith("runs the")
    assert not checked.citations[1].quote_verified  # an excerpt of the passage instead
    assert checked.citations[1].quote == "Something else entirely, about budgets."
    prose = check('It "runs the release checks before each build" [1]. It says "budgets are unlimited" [2].', passages)
    assert [q["found"] for q in prose.quotes] == [True, False]


def test_duplicate_passages_are_given_once_within_the_budget():
    cands = [
        {
            "doc_id": d,
            "path": d,
            "title": d,
            "section": "",
            "page_start": None,
            "page_end": None,
            "first_chunk": 0,
            "last_chunk": 0,
            "chunk_ids": [f"{d}:0"],
            "text": t,
            "score": 1.0,
        }
        for d, t in (("a", "Same words here."), ("b", "same  words HERE."), ("c", "x" * 400), ("d", "short"))
    ]
    got = pack(cands, max_tokens=20)
    assert [p.doc_id for p in got] == ["a", "d"]  # b duplicates a; c does not fit
    assert [p.number for p in got] == [1, 2]
    first = pack(cands[2:], max_tokens=20)
    assert first[0].truncated and first[0].tokens <= 20  # a first passage is cut, never dropped


@pytest.mark.parametrize(
    "question, text, shares",
    [
        ("When does the wombat programme ship builds?", "Builds ship on Tuesdays.", True),  # stems: builds/ship
        ("What does the document say about wombats?", "The wombat eats grass.", True),
        ("Explain what the document describes", "Explain what the document describes.", False),  # question words only
        ("zyxxqv plorbnik frumious", "The wombat eats grass.", False),
        ("the of and what", "the of and what", False),
    ],
)
def test_content_words_as_bm25_reads_them(question, text, shares):
    assert shares_content_word(question, [passage(1, text)]) is shares
    assert "what" not in content_terms(question)


# --- through the fake endpoint --------------------------------------------------------------------


def test_answered_with_checked_citations_and_the_prompt_fences_the_evidence(store, fake):
    fake.chat_handler = lambda body: {
        "status": "answered",
        "claims": [
            {"text": "Builds ship every Tuesday.", "citations": [1, 42], "quote": "ships its builds every Tuesday"}
        ],
    }
    with open_with(store, fake) as idx:
        got = idx.answer("When does the wombat programme ship its builds?")
    assert got.status == "answered", got.error
    assert got.text == "Builds ship every Tuesday [1]."
    assert got.dropped == [{"number": 42, "sentence": "Builds ship every Tuesday."}]
    cit = got.citations[0]
    assert cit.path.endswith("docs/build.md") and cit.quote_verified and cit.chunk_id in cit.chunk_ids
    assert got.evidence[cit.passage - 1].doc_id == cit.doc_id
    assert got.usage["calls"] == 1 and got.usage["prompt_tokens"] > 0 and got.usage["completion_tokens"] > 0
    assert {"retrieve", "generate", "total"} <= set(got.timings)
    (request,) = fake.calls_to("/v1/chat/completions")
    assert request.json["response_format"]["type"] == "json_schema"  # structured output, numbers enumerated
    schema = request.json["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["claims"]["items"]["properties"]["citations"]["items"]["enum"] == [
        p.number for p in got.evidence
    ]
    prompt = fake.prompts[0]
    assert '<passage number="1" source="/r/docs/build.md">' in prompt and "untrusted" in prompt
    assert "sk-test-secret" not in json.dumps(got.to_dict())


def test_not_found_makes_no_request(store, fake):
    with open_with(store, fake) as idx:
        got = idx.answer("zyxxqv plorbnik frumious bandersnatch")
        assert got.status == "not_found" and fake.calls == 0
        assert got.searched["reason"] and got.searched["terms"] == ["zyxxqv", "plorbnik", "frumious", "bandersnatch"]
        weak = idx.search("wombat", k=3)
        weak.weak = True

        def weak_search(*a, **kw):  # the serving side's relevance signal says nothing passes
            return weak

        idx.search = weak_search
        got = idx.answer("When does the wombat programme ship its builds?")
    assert got.status == "not_found" and "relevance" in got.searched["reason"] and fake.calls == 0


def test_the_model_saying_not_found_is_not_found(store, fake):
    fake.chat_handler = lambda body: "NOT_FOUND"
    with open_with(store, fake) as idx:
        got = idx.answer("What did the wombat programme spend on quartz?", style="text")
    assert got.status == "not_found" and fake.calls == 1 and "response_format" not in fake.requests[0].json


def test_retries_are_bounded_and_end_in_one_clear_error(store, fake):
    fake.chat_handler = lambda body: "Builds ship on Tuesday [1]."
    fake.fail_next(1, status=429, retry_after=0.01)
    with open_with(store, fake) as idx:
        got = idx.answer("When does the wombat programme ship its builds?", style="text")
        assert got.status == "answered" and got.usage["retries"] == 1 and fake.calls == 2
        fake.reset()
        fake.fail_next(10, status=503, retry_after=0.01)
        got = idx.answer("When does the wombat programme ship its builds?", style="text")
    assert got.status == "error" and got.error.startswith("HTTP 503") and "\n" not in got.error
    assert fake.calls == 4  # the runtime's bound
    assert "sk-test-secret" not in got.error


def test_context_length_error_is_retried_with_less_evidence(store, fake):
    fake.chat_handler = lambda body: "Builds ship on Tuesday [1]."
    with open_with(store, fake) as idx:
        full = idx.answer("wombat programme quartz builds picnic budget", style="text")
        n_full = len(full.evidence)
        assert n_full >= 3
        fake.reset()
        fake.max_context = max(fake_tokens_of(p) for p in fake_prompts(idx)) - 30
        got = idx.answer("wombat programme quartz builds picnic budget", style="text")
    assert got.status == "answered", got.error
    assert len(got.evidence) < n_full and got.warnings and fake.calls >= 2
    assert all(c.passage <= len(got.evidence) for c in got.citations)


def fake_prompts(idx):
    from quarry.search.evidence import gather
    from quarry.search.prompting import answer_messages

    _, passages = gather(idx, "wombat programme quartz builds picnic budget", max_tokens=3000)
    return [answer_messages("wombat programme quartz builds picnic budget", passages, "text")]


def fake_tokens_of(messages):
    from fakeopenai import fake_tokens

    return sum(fake_tokens(m["content"]) for m in messages)


def test_history_is_condensed_into_a_standalone_question(store, fake):
    def handler(body):
        if "standalone" in body["messages"][0]["content"]:
            return "When does the wombat programme ship its builds?"
        return "Every Tuesday [1]."

    fake.chat_handler = handler
    history = [
        {"role": "user", "content": "Tell me about the wombat programme."},
        {"role": "assistant", "content": "It is a programme [1]."},
    ]
    with open_with(store, fake) as idx:
        got = idx.answer("and when does it ship them?", history=history, style="text")
    assert got.standalone_question == "When does the wombat programme ship its builds?"
    assert got.status == "answered" and fake.calls == 2 and got.usage["calls"] == 2
    assert "Question: When does the wombat programme ship its builds?" in fake.prompts[1]


def test_streaming_events_end_with_checked_citations(store, fake):
    fake.chat_handler = lambda body: "The builds ship every Tuesday [2]. The picnic was in June [9]."
    with open_with(store, fake) as idx:
        events = list(idx.answer_events("When does the wombat programme ship builds and picnic?"))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "evidence" and kinds[-1] == "answer" and kinds.count("token") >= 2
    final = events[-1][1]
    assert "".join(v for k, v in events if k == "token").startswith("The builds ship")
    assert final.status == "answered" and final.text.startswith("The builds ship every Tuesday [1].")
    assert [d["number"] for d in final.dropped] == [9] and final.usage["completion_tokens"] > 0
    assert fake.requests[0].json["stream"] is True
    with open_with(store, fake) as idx:
        assert [k for k, _ in idx.answer_events("zyxxqv plorbnik")] == ["answer"]
    assert fake.calls == 1


def test_a_reader_leaving_the_stream_closes_the_models_stream(store, fake):
    import openai

    fake.chat_handler = lambda body: "The builds ship every Tuesday [1]. " * 20
    streams = []

    class Recording:  # the real client; the streams it opened kept to look at
        def __init__(self):
            real = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0)
            self.chat = self
            self.completions = self
            self._create = real.chat.completions.create

        def create(self, **kwargs):
            streams.append(self._create(**kwargs))
            return streams[-1]

    with open_with(store, fake) as idx:
        events = idx.answer_events("When does the wombat programme ship its builds?", client=Recording())
        assert next(events)[0] == "evidence" and next(events)[0] == "token"
        events.close()  # the client went away
    assert len(streams) == 1 and streams[0].response.is_closed


def test_streaming_checks_and_retrieves_before_the_first_event(store, monkeypatch):
    from quarry.core.errors import UsageError

    for name in ("OPENAI_API_KEY", "QUARRY_LLM_API_KEY", "QUARRY_LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with quarry.open(store, Settings.from_env(embed_backend="hash", embed_dim=DIM)) as idx:
        with pytest.raises(UsageError, match="QUARRY_LLM_BASE_URL") as streamed:
            idx.answer_events("When does the wombat programme ship its builds?")  # not yet iterated
        with pytest.raises(UsageError) as whole:
            idx.answer("When does the wombat programme ship its builds?")
    assert str(streamed.value) == str(whole.value)  # one message, both ways


def test_no_endpoint_is_a_clear_error(store, monkeypatch):
    from quarry.core.errors import UsageError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("QUARRY_LLM_API_KEY", raising=False)
    monkeypatch.delenv("QUARRY_LLM_BASE_URL", raising=False)
    with quarry.open(store, Settings.from_env(embed_backend="hash", embed_dim=DIM)) as idx:
        with pytest.raises(UsageError, match="QUARRY_LLM_BASE_URL"):
            idx.answer("When does the wombat programme ship its builds?")


def test_quarry_ask_prints_the_answer_and_its_sources(store, fake, monkeypatch):
    from click.testing import CliRunner

    from quarry.cli.main import cli

    fake.chat_handler = lambda body: "Builds ship every Tuesday [2]. Nobody knows why."
    for name, value in (
        ("QUARRY_LLM_BASE_URL", fake.base_url),
        ("QUARRY_LLM_MODEL", "fake-chat"),
        ("QUARRY_EMBED_BACKEND", "hash"),
        ("QUARRY_EMBED_DIM", str(DIM)),
    ):
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    text = runner.invoke(
        cli,
        [
            "ask",
            "When does the wombat programme ship its builds?",
            "--db",
            str(store),
            "--style",
            "text",
            "--show-evidence",
        ],
    )
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("Builds ship every Tuesday [1]. Nobody knows why.\n\nSources:\n  [1] /r/docs/")
    assert "Evidence given to the model:" in text.stdout and "--- passage 1:" in text.stdout
    assert "warning: no citation for: Nobody knows why." in text.stderr
    data = json.loads(runner.invoke(cli, ["ask", "wombat builds Tuesday", "--db", str(store), "--json"]).stdout)
    assert data["status"] == "answered" and data["answer"] == data["text"] and data["citations"][0]["path"]
    none = runner.invoke(cli, ["ask", "zyxxqv plorbnik", "--db", str(store)])
    assert none.exit_code == 0 and none.stdout.startswith("Not found in the index:") and "zyxxqv" in none.stdout
    fake.fail_next(10, status=401)
    failed = runner.invoke(cli, ["ask", "wombat builds Tuesday", "--db", str(store)])
    assert failed.exit_code == 1 and "HTTP 401" in failed.stderr and "\n" not in failed.stderr.strip()


def test_a_slow_endpoint_times_out_within_a_bound(store, fake):
    fake.chat_handler = lambda body: "Builds ship on Tuesday [1]."
    fake.delay_next(10, 3.0)
    with open_with(store, fake, llm_timeout=1) as idx:
        got = idx.answer("When does the wombat programme ship its builds?", style="text")
    assert got.status == "error" and got.error == "request timed out"
    assert fake.calls == 4  # the bound: 4 attempts, each cut at llm_timeout
