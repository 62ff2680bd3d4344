"""One registry per extension point: names written once, next to the implementations; a new
component is one module; CLI choices and settings checks read the registries."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

from quarry.cli.main import cli
from quarry.core.errors import ConfigError
from quarry.core.registry import Registry
from quarry.core.settings import Settings
from quarry.ingest.context import CONTEXT_WRITERS, RuleContextWriter, get_context_writer
from quarry.ingest.embedders import EMBEDDERS, get_embedder
from quarry.ingest.sectioning import SECTIONERS, StructureSectioner, get_sectioner
from quarry.search.rerank import RERANKERS, get_reranker


def test_registry_basics():
    reg = Registry("widget")

    @reg.register("a", colour="red")
    def make_a():
        return "A"

    assert reg.names() == ("a",) and "a" in reg and "b" not in reg
    assert reg.get("a")() == "A" and reg.info("a") == {"colour": "red"}
    with pytest.raises(ConfigError, match=r"unknown widget 'b'; choose one of a"):
        reg.get("b")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(lambda: "other")


@pytest.mark.parametrize(
    "registry, names",
    [
        (EMBEDDERS, ("torch", "onnx", "onnx-int8", "openai", "hash")),
        (SECTIONERS, ("structure", "semantic", "llm")),
        (CONTEXT_WRITERS, ("rules", "llm")),
        (RERANKERS, ("cross-encoder", "llm")),
    ],
)
def test_builtins_register_themselves(registry, names):
    assert registry.names() == names


@pytest.mark.parametrize(
    "command, param, registry",
    [
        ("index", "embed_backend", EMBEDDERS),
        ("index", "sectioner", SECTIONERS),
        ("index", "context_writer", CONTEXT_WRITERS),
    ],
)
def test_cli_choices_are_the_registered_names(command, param, registry):
    option = next(p for p in cli.commands[command].params if p.name == param)
    assert tuple(option.type.choices) == registry.names()


@pytest.mark.parametrize(
    "command, param, module, name",
    [
        ("search", "segments", "quarry.search.segments", "PRESETS"),  # literal in the CLI: numpy stays unimported
        ("export", "fmt", "quarry.search.export", "FORMATS"),  # literal in the CLI: pyarrow stays unimported
        ("search", "fmt", "quarry.cli.output", "FORMATS"),
        ("search", "mode", "quarry.search.query", "MODES"),
    ],
)
def test_literal_cli_choices_match_their_source(command, param, module, name):
    from importlib import import_module

    option = next(p for p in cli.commands[command].params if p.name == param)
    assert tuple(option.type.choices) == tuple(getattr(import_module(module), name))


def test_factories_build_the_components(monkeypatch):
    monkeypatch.setenv("QUARRY_LLM_BASE_URL", "http://127.0.0.1:9")
    assert isinstance(get_sectioner("structure", 1000), StructureSectioner)
    assert isinstance(get_sectioner("llm", 1000), StructureSectioner)  # the LLM refines per batch from it
    assert isinstance(get_context_writer("llm", ("title",)), RuleContextWriter)
    assert get_embedder(Settings.from_env(embed_backend="hash", embed_dim=32)).dim == 32
    assert get_reranker("llm:some-model").model == "some-model"


@pytest.mark.parametrize(
    "field, registry",
    [
        ("embed_backend", EMBEDDERS),
        ("sectioner", SECTIONERS),
        ("context", CONTEXT_WRITERS),
    ],
)
def test_settings_accept_exactly_the_registered_names(field, registry):
    for name in registry.names():
        ok = Settings.from_env(**{field: name}, llm_base_url="http://127.0.0.1:9", openai_base_url="http://127.0.0.1:9")
        assert getattr(ok, field) == name
    with pytest.raises(
        ConfigError,
        match=f"'no-such-thing' is not a known {registry.kind}; choose one of {', '.join(registry.names())}",
    ):
        Settings.from_env(**{field: "no-such-thing"})


@pytest.mark.parametrize(
    "registry, name, message",
    [
        (EMBEDDERS, "tensorflow", "unknown embedding backend 'tensorflow'; choose one of torch, onnx"),
        (SECTIONERS, "by-magic", "unknown sectioner 'by-magic'; choose one of structure, semantic, llm"),
        (CONTEXT_WRITERS, "poetry", "unknown context writer 'poetry'; choose one of rules, llm"),
    ],
)
def test_unknown_names_list_the_registered_ones(registry, name, message):
    with pytest.raises(ConfigError, match=message):
        registry.get(name)


def test_env_typo_fails_the_index_command_before_any_work(tmp_path):
    done = CliRunner(env={"QUARRY_SECTIONER": "by-magic"}).invoke(
        cli, ["index", str(ROOT / "data" / "sample"), "--db", str(tmp_path / "db")]
    )
    assert done.exit_code == 2 and "not a known sectioner" in done.stderr
    assert not (tmp_path / "db").exists()


PLUGIN = """
import numpy as np
from quarry.ingest.embedders.base import EMBEDDERS


class CountingEmbedder:
    model, dim, max_tokens = "counting-8", 8, 64

    def embed(self, texts):
        return np.ones((len(texts), self.dim), dtype=np.float32) / np.sqrt(self.dim)

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]


@EMBEDDERS.register("counting")
def _counting(settings, **kw):
    return CountingEmbedder()
"""


def test_a_new_embedder_is_one_module(tmp_path):
    (tmp_path / "counting_embedder.py").write_text(PLUGIN, encoding="utf-8")
    # Settings take the registry's names: nothing else to edit
    code = (
        "import counting_embedder\n"
        "from quarry.core.settings import Settings\n"
        "from quarry.ingest.embedders import describe, get_embedder\n"
        "from quarry.cli.main import cli\n"
        "settings = Settings.from_env(embed_backend='counting')\n"
        "print(describe(settings), get_embedder(settings).embed(['a b']).shape)\n"
        "option = next(p for p in cli.commands['index'].params if p.name == 'embed_backend')\n"
        "print(option.type.choices)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "('counting-8', 8) (1, 8)",
        "('torch', 'onnx', 'onnx-int8', 'openai', 'hash', 'counting')",
    ]


def test_listing_names_loads_no_model_or_sdk():
    code = (
        "import sys; from quarry.ingest.embedders import EMBEDDERS; "
        "from quarry.ingest.sectioning import SECTIONERS; from quarry.ingest.context import CONTEXT_WRITERS; "
        "[r.get(n) for r, n in ((EMBEDDERS, 'onnx-int8'), (SECTIONERS, 'llm'), (CONTEXT_WRITERS, 'llm'))]; "
        "print(sorted(m for m in ('torch', 'onnxruntime', 'onnx', 'openai', 'tiktoken', 'sentence_transformers') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_embedder_modules_import_in_any_order():
    """local and onnx_backend share quarry.ingest.embedders.minilm and never import each other."""
    for first in ("onnx_backend", "local", "openai_provider", "hashing", "minilm"):
        code = (
            f"import quarry.ingest.embedders.{first}; import quarry.ingest.embedders as e; print(e.EMBEDDERS.names())"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, (first, done.stderr)
        assert done.stdout.strip() == "('torch', 'onnx', 'onnx-int8', 'openai', 'hash')", first


def test_threads_looking_up_at_once_all_find_the_built_ins(tmp_path, monkeypatch):
    """A server's first requests arrive together: none may see a registry half imported."""
    import threading

    from quarry.core.errors import ConfigError

    (tmp_path / "slowreg.py").write_text(
        "from quarry.core.registry import Registry\nREG = Registry('thing', ('slowreg_impl',))\n"
    )
    (tmp_path / "slowreg_impl.py").write_text(
        "import time\nfrom slowreg import REG\n\n@REG.register('a')\ndef a():\n    return 'a'\n\n"
        "time.sleep(0.3)\n\n@REG.register('b')\ndef b():\n    return 'b'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import slowreg

    failures, barrier = [], threading.Barrier(8)

    def look():
        barrier.wait()
        try:
            slowreg.REG.get("b")
        except ConfigError as exc:
            failures.append(str(exc))

    threads = [threading.Thread(target=look) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
