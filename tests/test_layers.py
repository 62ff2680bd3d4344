"""The package layout is the architecture: every import points downward (docs/ARCHITECTURE.md).

Layers, bottom first: ``core`` < ``retrieval`` < ``ingest`` < ``store`` < ``search`` < ``eval`` <
``api`` < ``tasks`` < ``flows`` < ``cli``. A module may import its own package and any package below it,
never one above, including imports inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["core", "retrieval", "ingest", "store", "search", "eval", "api", "tasks", "flows", "cli"]
# the package root only re-exports the public API (quarry.open, quarry.Index …), imported lazily
TOP = {"quarry", "quarry._checkout"}


def _sources() -> list[tuple[str, Path]]:
    out = []
    for pkg in LAYERS:
        folder = ROOT / pkg if pkg in ("tasks", "flows") else ROOT / "quarry" / pkg
        out += [(pkg, p) for p in sorted(folder.rglob("*.py"))]
    return out


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "quarry" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module == "quarry":
                found += [(node.lineno, f"quarry.{a.name}") for a in node.names]
    return found


def test_every_layer_is_a_package_with_modules():
    for pkg in LAYERS:
        folder = ROOT / pkg if pkg in ("tasks", "flows") else ROOT / "quarry" / pkg
        assert (folder / "__init__.py").is_file(), folder
    assert not [p.name for p in (ROOT / "quarry").glob("*.py")
                if p.name not in {"__init__.py", "__main__.py", "_checkout.py"}], "modules left flat in quarry/"


@pytest.mark.parametrize("layer,path", _sources(), ids=lambda v: str(v).split("/work/main/")[-1] if isinstance(v, Path) else v)
def test_imports_point_downward(layer, path):
    rank = LAYERS.index(layer)
    upward = []
    for line, module in _imports(path):
        target = _layer(module)
        if target is not None and LAYERS.index(target) > rank:
            upward.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({layer} -> {target})")
    assert not upward, "\n".join(upward)


def test_the_query_path_imports_no_prefect_lancedb_or_torch():
    import subprocess
    import sys

    code = ("import sys, quarry.search.query, quarry.search.rerank, quarry.search.windows, quarry.search.segments, "
            "quarry.search.serialize, quarry.api.app, quarry.api.mcp, quarry.api.server; "
            "quarry.api.app.create_app(quarry.api.app.ApiConfig(db='/nonexistent-store')); "
            "bad = [m for m in ('prefect', 'lancedb', 'torch') if m in sys.modules]; print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""
