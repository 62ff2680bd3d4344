"""The README's Python API example runs as written: its shell block indexes data/sample, its
Python block searches (rerank + segments + window) and exports through the library."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from click.testing import CliRunner
from conftest import ROOT

from quarry.cli.main import cli


def readme_blocks(heading: str) -> dict[str, list[str]]:
    """The fenced code blocks under ``heading`` (up to the next heading), by language."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = re.compile(r"\n#{1,3} ").search(text, start + len(heading) + 2)
    section = text[start : end.start() if end else len(text)]
    blocks: dict[str, list[str]] = {}
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", section, re.S):
        blocks.setdefault(lang, []).append(body)
    return blocks


def test_the_python_api_example_runs(prefect_api, tmp_path):
    blocks = readme_blocks("### Python API")
    assert len(blocks.get("sh", [])) == 1 and len(blocks.get("python", [])) == 1, blocks.keys()
    env = {**os.environ, "QUARRY_DB": str(tmp_path / "store")}  # the README's default store, moved
    for line in blocks["sh"][0].splitlines():
        args = shlex.split(line, comments=True)
        if not args:
            continue
        assert args[0] == "quarry", line
        # in-process (the session's Prefect server, no interpreter start); relative paths from the checkout
        done = CliRunner(env={"QUARRY_DB": env["QUARRY_DB"]}).invoke(
            cli, [a if a.startswith("-") or not (ROOT / a).exists() else str(ROOT / a) for a in args[1:]]
        )
        assert done.exit_code == 0, done.output

    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", blocks["python"][0]], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    hits = [ln for ln in lines if re.match(r"[123] \d\.\d\d /", ln)]
    assert [ln.split()[0] for ln in hits] == ["1", "2", "3"], done.stdout
    assert any("deploys.md" in ln for ln in hits), done.stdout
    assert any(" chunks " in ln for ln in lines), done.stdout  # at least one segment
    assert lines[-1].startswith("{'documents': 5,"), done.stdout
    assert sorted(p.name for p in (work / "sample-export").iterdir()) == [
        "chunks.jsonl",
        "documents.jsonl",
        "manifest.json",
        "sections.jsonl",
    ]
