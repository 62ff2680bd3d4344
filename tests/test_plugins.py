"""Plugins by entry point: a package outside quarry (tests/plugin/quarry-demo-plugin) adds a file
format, an embedding backend and a fusion method without touching quarry/, and the CLI lists and
uses them; a plugin that fails to load is named, not fatal."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

PLUGIN = ROOT / "tests" / "plugin" / "quarry-demo-plugin"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """The plugin installed as pip installs it (its dist-info holds the entry points), into a
    folder of its own that only the subprocesses below see."""
    target = tmp_path_factory.mktemp("plugin-site")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(PLUGIN),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return target


@pytest.fixture
def quarry_with_plugin(plugin_path, prefect_api):
    def run(*args, **env_vars):
        env = {**os.environ, "PYTHONPATH": str(plugin_path), **env_vars}
        return subprocess.run(
            [sys.executable, "-m", "quarry.cli.main", *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )

    return run


def test_the_cli_lists_the_plugin_components_and_names_the_broken_one(quarry_with_plugin):
    done = quarry_with_plugin("plugins", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    owned = {kind: {c["name"]: c["plugin"] for c in item["components"]} for kind, item in out.items()}
    assert owned["formats"]["demo"].startswith("demo (quarry_demo_plugin")
    assert owned["embedders"]["demo"].startswith("demo (quarry_demo_plugin.embedder")
    assert owned["fusions"]["max"].startswith("max (quarry_demo_plugin.fusion:register")
    assert owned["formats"]["md"] is None and owned["fusions"]["tmm"] is None  # quarry's own
    assert "broken" not in owned["sectioners"] and "on purpose" in out["sectioners"]["errors"][0]
    formats = quarry_with_plugin("formats").stdout
    assert any(line.startswith("demo") and "(plugin demo" in line for line in formats.splitlines())
    helped = quarry_with_plugin("index", "--help").stdout + quarry_with_plugin("search", "--help").stdout
    assert "demo" in helped and "max" in helped


def test_a_store_indexed_and_searched_through_plugins(quarry_with_plugin, tmp_path):
    tree, db = tmp_path / "tree", tmp_path / "db"
    tree.mkdir()
    (tree / "birds.demo").write_text("== Herons\nThe grey heron fishes at dawn.\n== Owls\nBarn owls hunt at night.\n")
    (tree / "notes.md").write_text("# Notes\n\nA plain Markdown page about compost.\n")
    done = quarry_with_plugin("index", tree, "--db", db, "--embed-backend", "demo", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 2
    done = quarry_with_plugin(
        "search", "barn owls hunting", "--db", db, "--fusion", "max", "--json", "-k", "3", QUARRY_EMBED_BACKEND="demo"
    )
    assert done.returncode == 0, done.stderr
    top = json.loads(done.stdout)["results"][0]
    assert top["path"].endswith("birds.demo") and top["section"] == "Owls" and top["file_type"] == "demo"
    assert json.loads(done.stdout)["fusion"] == "max"
    sql = quarry_with_plugin(
        "sql",
        "SELECT metadata->>'parsed_by' AS by FROM documents WHERE file_type = 'demo'",
        "--db",
        db,
        "--format",
        "json",
    )
    assert json.loads(sql.stdout) == [{"by": "quarry-demo-plugin"}]


def test_a_parser_that_never_returns_fails_its_file_within_the_limits(quarry_with_plugin, tmp_path):
    """A heavy format whose parser spins the CPU forever is stopped at its CPU budget
    (QUARRY_PARSE_TIMEOUT), parsed once more alone with four times the budget, then reported; one
    that sleeps forever is stopped by the wall-clock backstop (ten times the budget); the rest of
    the tree is indexed. Before, a lone heavy file parsed in the run's own process with no limit
    (this run never ended) and the limit was wall-clock time."""
    tree, db = tmp_path / "tree", tmp_path / "db"
    tree.mkdir()
    (tree / "forever.spin").write_text("spins")
    (tree / "asleep.wait").write_text("sleeps")
    (tree / "notes.md").write_text("# Notes\n\nA plain Markdown page about compost.\n")
    done = quarry_with_plugin(
        "index", tree, "--db", db, "--json", QUARRY_PARSE_TIMEOUT="1", QUARRY_EMBED_BACKEND="hash"
    )
    assert done.returncode == 3, done.stderr  # some files failed; the rest committed
    report = json.loads(done.stdout)
    assert report["added"] == 1 and report["failed"] == 2
    errors = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in report["errors"]}
    assert (
        "more than 1 s of CPU, and more than 4 s when parsed again alone (QUARRY_PARSE_TIMEOUT"
        in errors["forever.spin"]
    )
    assert "longer than 10 s of wall time" in errors["asleep.wait"] and "looks stuck" in errors["asleep.wait"]


def test_without_the_plugin_its_names_are_unknown(cli, tmp_path):
    done = cli("search", "x", "--db", tmp_path / "none", "--fusion", "max")
    assert done.returncode == 2 and "'max' is not one of 'tmm', 'rrf'" in done.stderr


SECRET = "demo-secret-key-8d1f40c2"


def test_a_hosted_embedder_and_a_source_scheme_bring_their_own_settings(quarry_with_plugin, tmp_path):
    """The plugin's `demo-hosted` backend (an OpenAI-compatible API, here the fake server) and its
    `demo://` source scheme declare their settings where they register: quarry reads them from
    QUARRY_<NAME> (or a declared fallback), says which is missing or wrong, indexes and searches
    through them, and keeps the declared secret out of every file the store holds."""
    from fakeopenai import FakeOpenAI

    bucket = tmp_path / "buckets" / "shelf" / "docs"
    bucket.mkdir(parents=True)
    (bucket / "birds.demo").write_text("== Herons\nThe grey heron fishes at dawn.\n== Owls\nBarn owls hunt at night.\n")
    (bucket / "notes.md").write_text("# Notes\n\nA plain Markdown page about compost heaps.\n")
    db = tmp_path / "db"
    listed = json.loads(quarry_with_plugin("plugins", "--json").stdout)
    hosted = next(c for c in listed["embedders"]["components"] if c["name"] == "demo-hosted")
    assert {o["variable"]: (o["required"], o["secret"]) for o in hosted["options"]}["QUARRY_DEMO_API_KEY"] == (
        True,
        True,
    )
    source = next(c for c in listed["sources"]["components"] if c["name"] == "demo")
    assert [o["variable"] for o in source["options"]] == ["QUARRY_DEMO_SOURCE_ROOT"]
    shown = quarry_with_plugin("plugins").stdout
    assert "demo-hosted: QUARRY_DEMO_API_KEY (required, secret; its key)" in shown

    with FakeOpenAI(dim=64, api_key=SECRET) as server:
        env = {"QUARRY_DEMO_SOURCE_ROOT": str(tmp_path / "buckets"), "QUARRY_DEMO_API_URL": server.base_url}
        args = ("index", "demo://shelf/docs", "--db", db, "--embed-backend", "demo-hosted", "--json")
        missing = quarry_with_plugin(*args, **env)
        assert missing.returncode == 2, missing.stderr
        assert "QUARRY_DEMO_API_KEY (or DEMO_API_KEY) is required by embedding backend 'demo-hosted'" in missing.stderr
        wrong = quarry_with_plugin(*args, **env, DEMO_API_KEY=SECRET, QUARRY_DEMO_API_DIM="wide")
        assert wrong.returncode == 2 and "QUARRY_DEMO_API_DIM='wide' is not a whole number" in wrong.stderr
        assert server.calls == 0  # nothing asked of the API before the settings were right

        done = quarry_with_plugin(*args, **env, DEMO_API_KEY=SECRET)  # the declared fallback variable
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["added"] == 2 and report["failed"] == 0
        asked = [r.json for r in server.calls_to("/v1/embeddings")]
        assert asked and all(a["model"] == "demo-embed-small" and a["dimensions"] == 32 for a in asked)

        found = quarry_with_plugin(
            "search",
            "barn owls hunting at night",
            "--db",
            db,
            "--json",
            "-k",
            "3",
            QUARRY_EMBED_BACKEND="demo-hosted",
            DEMO_API_KEY=SECRET,
            **env,
        )
        assert found.returncode == 0, found.stderr
        top = json.loads(found.stdout)["results"][0]
        assert top["path"] == "demo://shelf/docs/birds.demo" and top["section"] == "Owls"

    rows = quarry_with_plugin("sql", "SELECT settings FROM runs", "--db", db, "--format", "json")
    settings = json.loads(json.loads(rows.stdout)[-1]["settings"])
    assert settings["options"]["demo_api_key"] == "***" and settings["options"]["demo_api_dim"] == 32
    leaked = [p for p in db.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == [] and SECRET not in done.stderr + found.stderr
