"""Settings read by pydantic-settings: overrides, QUARRY_* variables, .env, and clear errors."""

from __future__ import annotations

import pickle

import pytest

from quarry.core.errors import ConfigError
from quarry.core.settings import HEADER_FIELDS, Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No QUARRY_* / OPENAI_* variables and no .env from the caller's directory."""
    import os

    for name in list(os.environ):
        if name.startswith(("QUARRY_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_overrides_win_over_the_environment_over_defaults(monkeypatch):
    monkeypatch.setenv("QUARRY_CHUNK_SIZE", "600")
    monkeypatch.setenv("QUARRY_SECTIONER", "semantic")
    s = Settings.from_env(chunk_size=900, sectioner=None)  # None: not given
    assert (s.chunk_size, s.sectioner, s.context) == (900, "semantic", "rules")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1", True),
        ("true", True),
        ("Yes", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("no", False),
        ("off", False),
    ],
)
def test_booleans(monkeypatch, raw, expected):
    monkeypatch.setenv("QUARRY_LLM_SECTION_SUMMARIES", raw)
    assert Settings.from_env().llm_section_summaries is expected


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"QUARRY_LLM_SECTION_SUMMARIES": "ture"},
            "QUARRY_LLM_SECTION_SUMMARIES='ture' is not a boolean; use one of true/false, 1/0, yes/no, on/off",
        ),
        ({"QUARRY_OCR": "nope"}, "QUARRY_OCR='nope' is not a boolean"),
        (
            {"QUARRY_SECTIONER": "semantik"},
            "QUARRY_SECTIONER='semantik' is not a known sectioner; choose one of structure, semantic, llm",
        ),
        ({"QUARRY_EMBED_BACKEND": "onnx-int4"}, "choose one of torch, onnx, onnx-int8, openai, hash"),
        ({"QUARRY_CHUNK_SIZE": "big"}, "QUARRY_CHUNK_SIZE='big' is not an integer"),
        ({"QUARRY_CHUNK_SIZE": "50"}, "chunk_size must be at least 100, got 50"),
        ({"QUARRY_HEADER_FIELDS": "title,colour"}, "QUARRY_HEADER_FIELDS: unknown header field 'colour'"),
        ({"QUARRY_CHUNK_OVERLAP": "400"}, "chunk_overlap must be between 0 and half of chunk_size, got 400"),
    ],
)
def test_bad_values_are_config_errors_naming_the_variable(monkeypatch, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        Settings.from_env()
    assert message in str(info.value)


def test_a_bad_keyword_is_named_as_a_keyword():
    with pytest.raises(ConfigError, match=r"^sectioner='lm' is not a known sectioner"):
        Settings.from_env(sectioner="lm")
    with pytest.raises(ConfigError, match="unknown setting 'chunksize'"):
        Settings.from_env(chunksize=500)


def test_lists_are_comma_separated(monkeypatch):
    monkeypatch.setenv("QUARRY_INCLUDE", "*.md, docs/**/*.txt,")
    monkeypatch.setenv("QUARRY_HEADER_FIELDS", "title,section")
    s = Settings.from_env()
    assert s.include == ("*.md", "docs/**/*.txt") and s.header_fields == ("title", "section")
    assert set(HEADER_FIELDS) >= set(s.header_fields)


def test_empty_variables_mean_the_default(monkeypatch):
    monkeypatch.setenv("QUARRY_CHUNK_SIZE", "")
    assert Settings.from_env().chunk_size == 800


def test_dotenv_in_the_working_directory_is_read(monkeypatch, tmp_path):
    (tmp_path / ".env").write_text(
        "QUARRY_CHUNK_SIZE=640\nQUARRY_OCR=off\nOTHER_TOOL_SETTING=x\nOPENAI_API_KEY=sk-from-dotenv\n"
    )
    s = Settings.from_env()
    assert (s.chunk_size, s.ocr, s.openai_api_key, s.llm_api_key) == (640, False, "sk-from-dotenv", "sk-from-dotenv")
    monkeypatch.setenv("QUARRY_CHUNK_SIZE", "700")  # the environment wins over .env
    assert Settings.from_env().chunk_size == 700


def test_a_typo_in_dotenv_is_an_error(tmp_path):
    (tmp_path / ".env").write_text("QUARRY_LLM_CHUNK_CONTEXT=ture\n")
    with pytest.raises(ConfigError, match="QUARRY_LLM_CHUNK_CONTEXT='ture' is not a boolean"):
        Settings.from_env()


def test_keys_fall_back_to_openai_api_key_and_never_show(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-shared-secret")
    s = Settings.from_env()
    assert s.openai_api_key == s.llm_api_key == "sk-shared-secret"
    monkeypatch.setenv("QUARRY_LLM_API_KEY", "sk-llm-secret")
    s = Settings.from_env(openai_api_key="sk-explicit-secret")
    assert (s.openai_api_key, s.llm_api_key) == ("sk-explicit-secret", "sk-llm-secret")
    assert "secret" not in repr(s) and "secret" not in str(s.public_dict())
    assert s.public_dict()["openai_api_key"] == "***" and s.public_dict()["llm_api_key"] == "***"


def test_settings_are_frozen_hashable_and_picklable():
    s = Settings.from_env(chunk_size=500)
    assert hash(s) == hash(Settings.from_env(chunk_size=500)) and s == Settings.from_env(chunk_size=500)
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(Exception):
        s.chunk_size = 100


def test_cross_field_checks_keep_their_messages():
    with pytest.raises(ConfigError, match="--sectioner llm needs an OpenAI-compatible endpoint"):
        Settings.from_env(sectioner="llm")
    with pytest.raises(ConfigError, match="the openai backend needs QUARRY_OPENAI_API_KEY"):
        Settings.from_env(embed_backend="openai")


def test_every_prefect_variable_quarry_sets_is_one_prefect_reads():
    """A misspelt PREFECT_* name is silently ignored by Prefect: each one quarry sets must be a
    setting Prefect knows (its private server's lean start included)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    code = (
        "import os; from quarry.flows.orchestration import LEAN_START, prefect_environment; prefect_environment(); "
        "os.environ.update(LEAN_START); "
        "from prefect.settings import Settings; from prefect.settings.legacy import _get_settings_fields; "
        "known = set(_get_settings_fields(Settings)); "
        "print([k for k in os.environ if k.startswith('PREFECT_') and k not in known])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
