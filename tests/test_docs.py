"""User docs are short and true: the tables that mirror code are checked against it, so they cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT

DOCS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"


def _code_files() -> list[Path]:
    return [p for folder in ("quarry", "flows", "tasks") for p in (ROOT / folder).rglob("*.py")]


def _settings_rows() -> dict[str, str]:
    """Each ``QUARRY_*`` variable of docs/settings.md -> the table row (or paragraph) naming it."""
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        for var in re.findall(r"QUARRY_[A-Z0-9_]+", line):
            rows.setdefault(var, line)
    return rows


def test_every_setting_and_environment_variable_is_documented_with_its_default():
    from quarry.core.environment import Environment
    from quarry.core.settings import Settings

    rows = _settings_rows()
    fields = {
        f"QUARRY_{name.upper()}": field
        for model in (Settings, Environment)
        for name, field in model.model_fields.items()
    }
    read = {
        v for p in _code_files() for v in re.findall(r"[\"'](QUARRY_[A-Z0-9_]+)[\"']", p.read_text(encoding="utf-8"))
    }
    missing = sorted((set(fields) | read) - set(rows))
    assert not missing, f"docs/settings.md does not document {missing}"
    wrong = []
    for var, field in fields.items():
        row = rows[var]
        cells = [c.strip() for c in row.split("|")]
        if len(cells) < 5 or len(re.findall(r"QUARRY_[A-Z0-9_]+", cells[2])) != 1:
            continue  # a row shared by several variables, or prose: defaults listed together
        default, shown = field.default, cells[3]
        if isinstance(default, bool):
            ok = shown == ("on" if default else "off")
        elif isinstance(default, (int, float)) and default:
            ok = re.sub(r"[,_]", "", shown) == f"{default:g}"
        else:
            continue  # 0 / "" mean "the model's", "CPUs", "none": said in words
        if not ok:
            wrong.append(f"{var}: documented {shown!r}, code {default!r}")
    assert not wrong, wrong


def test_the_readme_is_short_and_names_every_command():
    from click.testing import CliRunner

    from quarry.cli.main import cli

    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for name in cli.commands:
        assert f"quarry {name}" in text, f"README does not show `quarry {name}`"
        assert CliRunner().invoke(cli, [name, "--help"]).exit_code == 0


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_user_docs_speak_to_users(path):
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"\b[Ii]ssues? \d+", text), f"{path.name} mentions an issue number"


def test_the_default_fusion_is_stated_truly():
    from quarry.search.fusion import DEFAULT_FUSION, FUSIONS

    readme = README.read_text(encoding="utf-8")
    query = (ROOT / "docs" / "query.md").read_text(encoding="utf-8")
    assert DEFAULT_FUSION == "tmm" and set(FUSIONS) == {"tmm", "rrf"}
    assert "fused by reciprocal rank fusion" not in readme
    assert f"(`{DEFAULT_FUSION}`, the default" in readme
    assert f"**`{DEFAULT_FUSION}` (default)" in query
    assert f'fusion="{DEFAULT_FUSION}"' in readme and f'fusion="{DEFAULT_FUSION}"' in query


def test_the_fusion_constants_in_docs_are_the_code_s():
    from quarry.search.fusion import DEFAULT_K, DOC_WEIGHT, TMM_ADAPT, TMM_ALPHA

    query = (ROOT / "docs" / "query.md").read_text(encoding="utf-8")
    assert f"α = {TMM_ALPHA:g}" in query and f"`w = {DOC_WEIGHT:g}`" in query
    assert f"default is `a = {TMM_ADAPT:g}`" in query and f"[--rrf-k {DEFAULT_K}]" in query


def test_every_file_type_is_in_the_column_reference():
    from quarry.ingest.parsers.describe import describe_formats

    export = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    row = next(line for line in export.splitlines() if line.startswith("| `file_type` |"))
    documented = set(re.findall(r"`([a-z0-9]+)`", row)) - {"file_type"}
    assert documented == {r["type"] for r in describe_formats()}


def test_every_doc_the_readme_links_exists():
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).is_file(), target
    linked = set(re.findall(r"docs/([A-Za-z-]+\.md)", text))
    assert {p.name for p in DOCS} <= linked, (
        f"docs not reachable from README: {sorted({p.name for p in DOCS} - linked)}"
    )
