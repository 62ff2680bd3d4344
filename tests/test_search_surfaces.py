"""The arguments of a search and an answer are declared once (quarry/search/parameters.py); the CLI's
options, the HTTP API's OpenAPI schema and the MCP tools' input schemas are made from them. These
tests read each surface as a user meets it (click's parameters, ``/openapi.json``, the tools an MCP
client lists) and compare every name, limit, default and description with the declaration, so a
surface that drifts fails here; and the library refuses what the declaration's limits refuse."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from click.testing import CliRunner
from test_query import SETTINGS, make_store

from quarry.cli.main import cli
from quarry.core.errors import UsageError
from quarry.search import parameters as p
from quarry.search.parameters import ANSWER, FILTERS, SEARCH

# the CLI's spellings: --name-with-dashes, but for these, older than the declarations and kept
CLI_SPELLINGS = {"k": "-k", "min_scores": "--min-score"}
# what is the CLI's own (where to find the store, who asks, how to print), not an argument of a search
CLI_ONLY = {
    "search": {"db", "as_principals", "fmt", "show_copies", "as_json"},
    "ask": {"db", "as_principals", "fmt", "show_evidence", "as_json", "model", "llm_base_url", "llm_api_key"},
}
HTTP_ONLY = {"SearchRequest": set(), "AnswerRequest": {"history", "stream"}}
COMMANDS = {"search": {**FILTERS, **SEARCH}, "ask": {**FILTERS, **ANSWER}}
REQUESTS = {"SearchRequest": {**FILTERS, **SEARCH}, "AnswerRequest": {**FILTERS, **ANSWER}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("surfaces") / "s")


@pytest.fixture(scope="module")
def index(store):
    import quarry.search.query

    with quarry.search.query.open(store, SETTINGS) as idx:
        yield idx


# --- the CLI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_options_are_the_declarations(command):
    import click

    declared = COMMANDS[command]
    params = {q.name: q for q in cli.commands[command].params}
    (argument,) = [q for q in params.values() if isinstance(q, click.Argument)]
    assert argument.name in declared and declared[argument.name].required  # QUERY, QUESTION
    options = {name: q for name, q in params.items() if isinstance(q, click.Option)}
    assert set(options) - CLI_ONLY[command] == set(declared) - {argument.name}, "an option nobody declared"
    for name, param in declared.items():
        if param.required:
            continue
        option = options[name]
        spelled = CLI_SPELLINGS.get(name, f"--{name.replace('_', '-')}")
        assert option.opts == [spelled], (name, option.opts)
        if param.kind == p.FLAG and param.default:
            assert option.secondary_opts == [f"--no-{spelled[2:]}"]  # --collapse/--no-collapse
        many = param.kind in (p.TEXTS, p.NUMBERS)
        assert option.multiple == many, name
        assert option.help == param.description + (" Repeatable." if many else ""), name
        assert option.default == (() if many else param.default), name
        if param.kind == p.INT:
            assert (option.type.min, option.type.max) == (param.minimum, param.maximum), name
        if param.kind in (p.CHOICE, p.SEGMENTS_KIND):
            assert tuple(option.type.choices) == param.names(), name


def test_every_segments_preset_is_declared():
    from quarry.search.segments import PRESETS

    assert p.SEGMENTS.choices == tuple(PRESETS)


# --- HTTP: the OpenAPI schema ------------------------------------------------------------------------


def _branches(prop: dict) -> list[dict]:
    return [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]


def _branch(prop: dict, kind: str) -> dict:
    (found,) = [b for b in _branches(prop) if b.get("type") == kind]
    return found


def check_json(prop: dict, param, required: bool) -> None:
    """One property of a JSON schema (an HTTP body's, an MCP tool's) against its declaration."""
    assert prop.get("description") == param.description, param.name
    assert required == param.required, param.name
    assert prop.get("default") == (None if param.required else param.default), param.name
    if param.kind == p.INT:
        number = _branch(prop, "integer")
        assert (number["minimum"], number["maximum"]) == (param.minimum, param.maximum), param.name
    elif param.kind == p.TEXT:
        text = _branch(prop, "string")
        assert text.get("maxLength") == param.max_length, param.name
        assert text.get("minLength") == (1 if param.required else None), param.name
    elif param.kind == p.TEXTS:  # a string or a list of them: both, with the request bounds
        assert _branch(prop, "string")["maxLength"] == param.max_length, param.name
        array = _branch(prop, "array")
        assert (array["items"]["maxLength"], array["maxItems"]) == (param.max_length, param.max_items), param.name
    elif param.kind == p.CHOICE:
        if param.registry is None:
            assert tuple(_branch(prop, "string")["enum"]) == param.choices, param.name
        else:  # a registry's names grow with plugins: checked on each request, bounded here
            assert _branch(prop, "string")["maxLength"] == param.max_length, param.name
    elif param.kind == p.FLAG:
        assert _branch(prop, "boolean"), param.name
    elif param.kind == p.NUMBERS:
        mapping = _branch(prop, "object")
        assert tuple(mapping["propertyNames"]["enum"]) == param.keys, param.name
        values = mapping["additionalProperties"]
        assert (values.get("minimum"), values.get("maximum")) == (param.minimum, param.maximum), param.name
    elif param.kind == p.WINDOW_KIND:  # "B,A", one number, or [B, A]
        assert _branch(prop, "string")["maxLength"] == param.max_length
        side = _branch(prop, "integer")
        assert (side["minimum"], side["maximum"]) == (param.minimum, param.maximum)
        assert _branch(prop, "array")["prefixItems"] == [side, side]
    elif param.kind == p.SEGMENTS_KIND:  # a preset, or a preset and overrides
        assert tuple(_branch(prop, "string")["enum"]) == param.choices
        assert any(b.get("$ref", "").endswith("/SegmentParams") for b in _branches(prop))
    else:
        raise AssertionError(f"no check for the kind {param.kind}")


@pytest.fixture(scope="module")
def openapi(store):
    from quarry.api.app import create_app
    from quarry.api.deps import ApiConfig

    return create_app(ApiConfig(db=str(store), mcp=False)).openapi()


@pytest.mark.parametrize("model", sorted(REQUESTS))
def test_http_fields_are_the_declarations(openapi, model):
    schema = openapi["components"]["schemas"][model]
    declared = REQUESTS[model]
    assert set(schema["properties"]) - HTTP_ONLY[model] == set(declared), "a field nobody declared"
    assert list(schema["properties"])[: len(declared)] == list(declared)  # docs/api.md lists them in order
    assert schema["additionalProperties"] is False
    for name, param in declared.items():
        check_json(schema["properties"][name], param, name in schema.get("required", ()))


# --- MCP: the tools' input schemas ----------------------------------------------------------------


def _server(index, rerankers=()):
    from quarry.api.auth import Caller
    from quarry.api.mcp import build

    return build(lambda: index, lambda ctx: Caller.owner(), rerankers)


def _tools(index) -> dict:
    return {t.name: t for t in asyncio.run(_server(index).list_tools())}


@pytest.mark.parametrize("tool, declared", [("search", {**FILTERS, **SEARCH}), ("answer", {**FILTERS, **ANSWER})])
def test_mcp_parameters_are_the_declarations_and_take_what_http_takes(index, openapi, tool, declared):
    schema = _tools(index)[tool].input_schema
    model = openapi["components"]["schemas"]["SearchRequest" if tool == "search" else "AnswerRequest"]
    assert set(schema["properties"]) <= set(declared), "a parameter nobody declared"
    assert {"k", "mode", "where", "path", "type", "since", "until"} <= set(schema["properties"])
    for name, prop in schema["properties"].items():
        check_json(prop, declared[name], name in schema.get("required", ()))
        assert _plain(prop) == _plain(model["properties"][name]), name  # HTTP's JSON: the same values pass
    if tool == "search":
        from quarry.api.schemas import SegmentParams

        assert schema["$defs"]["SegmentParams"] == SegmentParams.model_json_schema()


def _plain(prop: dict) -> dict:
    """A property as both schemas would write it (OpenAPI leaves out a null default and keeps its
    definitions under components)."""
    text = json.dumps({k: v for k, v in prop.items() if not (k == "default" and v is None)}, sort_keys=True)
    return json.loads(text.replace("#/components/schemas/", "#/$defs/"))


def _call(server, tool: str, args: dict):
    return json.loads(asyncio.run(server.call_tool(tool, args)).content[0].text)


@pytest.mark.parametrize(
    "where",
    ["file_type = 'md'", ["file_type = 'md'"], ["file_type = 'md'", "chunk_index >= 1"], "metadata.team = 'db'"],
)
def test_mcp_where_takes_a_string_or_a_list_as_http_does(index, where):
    from quarry.api.schemas import SearchRequest

    got = _call(_server(index), "search", {"query": "alpha", "k": 5, "where": where})
    expected = SearchRequest(query="alpha", k=5, where=where).run(index, None)
    assert got["results"] and [r["chunk_id"] for r in got["results"]] == [r["chunk_id"] for r in expected["results"]]
    assert got["filter"] == expected["filter"]


def test_mcp_refuses_what_the_declaration_refuses(index):
    from mcp.server.mcpserver.exceptions import ToolError

    server = _server(index)
    for args, said in (
        ({"query": "alpha", "k": p.K.maximum + 1}, "k"),
        ({"query": "alpha", "window": f"{p.WINDOW.maximum + 1},0"}, "window"),
        ({"query": "alpha", "where": ["x = 1"] * (FILTERS["where"].max_items + 1)}, "where"),
    ):
        with pytest.raises(ToolError, match=said):
            _call(server, "search", args)


# --- the library checks through the same declarations ------------------------------------------------


def _edges(param):
    return [(param.minimum - 1, "at least"), (param.maximum + 1, "at most")]


@pytest.mark.parametrize("name", [n for n, q in SEARCH.items() if q.kind == p.INT])
def test_the_library_refuses_what_the_declaration_refuses(index, name):
    param = SEARCH[name]
    for value, said in _edges(param):
        with pytest.raises(UsageError, match=f"{name} must be {said}"):
            index.search("alpha", **{name: value})
    assert index.search("alpha", **{name: param.maximum}).results  # the limit itself is allowed


@pytest.mark.parametrize(
    "kwargs, said",
    [
        ({"window": p.WINDOW.maximum + 1}, "at most 50 chunks on a side"),
        ({"window": (0, p.WINDOW.maximum + 1)}, "at most 50 chunks on a side"),
        ({"weights": {"bm25": SEARCH["weights"].maximum + 1}}, "weights: bm25 must be at most"),
        ({"min_scores": {"fused": float("inf")}}, "min_scores: fused must be finite"),
        ({"mode": "fuzzy"}, "unknown search mode"),
        ({"fusion": "combsum"}, "unknown fusion"),
    ],
)
def test_the_library_checks_every_kind(index, kwargs, said):
    with pytest.raises(UsageError, match=said):
        index.search("alpha", **kwargs)


@pytest.mark.parametrize(
    "kwargs, said",
    [
        ({"k": p.ANSWER_K.maximum + 1}, "k must be at most 100"),
        ({"k": 0}, "k must be at least 1"),
        ({"max_context_tokens": 49}, "max_context_tokens must be at least 50"),
        ({"style": "poem"}, "unknown answer style"),
        ({"mode": "fuzzy"}, "unknown search mode"),
    ],
)
def test_an_answer_refuses_what_the_declaration_refuses_before_any_model_call(index, kwargs, said):
    with pytest.raises(UsageError, match=said):
        index.answer("what is alpha?", **kwargs)


def test_the_cli_refuses_what_the_declaration_refuses(store):
    env = {"QUARRY_EMBED_BACKEND": "hash", "QUARRY_EMBED_DIM": str(SETTINGS.embed_dim)}
    done = CliRunner(env=env).invoke(cli, ["search", "alpha", "--db", str(store), "--window", "51,0"])
    assert done.exit_code == 2 and "at most 50 chunks on a side" in done.stderr, done.output
    done = CliRunner(env=env).invoke(cli, ["search", "alpha", "--db", str(store), "--min-score", "fused=0", "--json"])
    assert done.exit_code == 0, done.output  # every declared key, fused too
    done = CliRunner(env=env).invoke(cli, ["search", "alpha", "--db", str(store), "--no-collapse", "-k", "1000"])
    assert done.exit_code == 0, done.output


# --- the docs state the declared limits -------------------------------------------------------------


def _span(param) -> str:
    return f"{param.minimum:,}-{param.maximum:,}"


def test_the_docs_state_the_declared_limits():
    from conftest import ROOT

    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", api, re.M)}
    for name, param in SEARCH.items():
        if param.kind == p.INT:
            assert f"| {_span(param)} |" in rows[name], rows[name]
    assert f"1-{p.QUERY.max_length:,} characters" in rows["query"]
    assert f"({p.WINDOW.minimum}-{p.WINDOW.maximum})" in rows["window"]
    query = (ROOT / "docs" / "query.md").read_text(encoding="utf-8")
    for name in ("k", "candidates", "rrf_k", "rerank_candidates", "weights"):
        flag = CLI_SPELLINGS.get(name, f"--{name.replace('_', '-')}")
        assert f"`{flag}` {_span(SEARCH[name])}" in query, flag
    assert f"`--window` at most {p.WINDOW.maximum} chunks a side" in query
