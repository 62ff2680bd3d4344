"""The package layout is the architecture: every import points downward (docs/ARCHITECTURE.md).

Layers, bottom first: ``core`` < ``retrieval`` < ``ingest``, ``store`` < ``search`` < ``eval`` <
``api`` < ``tasks`` < ``flows`` < ``cli``. A module may import its own package and any package below it,
never one above nor one beside it, including imports inside functions (a lazy import is still a
dependency). ``ingest`` and ``store`` sit side by side: the pipeline decides what a run does from
what the store reads, persistence plans nothing, and neither imports the other (``tasks/`` hands
the store's reads to the pipeline and the pipeline's results to the writer).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# bottom first; the packages of one rank may not import each other
RANKS = [
    ("core",),
    ("retrieval",),
    ("ingest", "store"),
    ("search",),
    ("eval",),
    ("api",),
    ("tasks",),
    ("flows",),
    ("cli",),
]
LAYERS = [pkg for rank in RANKS for pkg in rank]
RANK = {pkg: i for i, rank in enumerate(RANKS) for pkg in rank}
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
    assert not [
        p.name for p in (ROOT / "quarry").glob("*.py") if p.name not in {"__init__.py", "__main__.py", "_checkout.py"}
    ], "modules left flat in quarry/"


def _not_downward(layer: str, imports: list[tuple[int, str]]) -> list[str]:
    """The imports of a module of ``layer`` that reach a package above it or beside it."""
    out = []
    for line, module in imports:
        target = _layer(module)
        if target is not None and target != layer and RANK[target] >= RANK[layer]:
            where = "beside" if RANK[target] == RANK[layer] else "above"
            out.append(f"{line}: imports {module} ({layer} -> {target}, {where} it)")
    return out


def test_the_rule_refuses_the_store_importing_the_pipeline_and_back():
    assert _not_downward("store", [(3, "quarry.ingest.plan")]) == [
        "3: imports quarry.ingest.plan (store -> ingest, beside it)"
    ]
    assert _not_downward("store", [(3, "quarry.ingest")])  # `from quarry import ingest`
    assert _not_downward("ingest", [(5, "quarry.store.reader")])
    assert _not_downward("store", [(7, "quarry.search.query")])
    assert _not_downward("store", [(1, "quarry.core.plans"), (2, "quarry.retrieval.corpus"), (3, "quarry.store")]) == []
    assert _not_downward("tasks", [(1, "quarry.ingest.plan"), (2, "quarry.store.reader")]) == []


@pytest.mark.parametrize(
    "layer,path", _sources(), ids=lambda v: str(v).split("/work/main/")[-1] if isinstance(v, Path) else v
)
def test_imports_point_downward(layer, path):
    bad = _not_downward(layer, _imports(path))
    assert not bad, "\n".join(f"{path.relative_to(ROOT)}:{b}" for b in bad)


def test_the_query_path_imports_no_prefect_lancedb_or_torch():
    import subprocess
    import sys

    code = (
        "import sys, quarry.search.query, quarry.search.rerank, quarry.search.windows, quarry.search.segments, "
        "quarry.search.serialize, quarry.api.app, quarry.api.mcp, quarry.api.server; "
        "quarry.api.app.create_app(quarry.api.app.ApiConfig(db='/nonexistent-store')); "
        "bad = [m for m in ('prefect', 'lancedb', 'torch') if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def _module_graph() -> dict[str, set[str]]:
    """Every module of the library (quarry/, flows/, tasks/) and the library modules it imports,
    imports inside functions included: a cycle hidden in a function is still a cycle."""
    modules: dict[str, Path] = {}
    for _, path in _sources():
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[0] in ("tasks", "flows"):
            parts = ["quarry", *parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back():
    """Within a layer, too, no two modules import each other (not even from inside a function)."""
    assert _cycles(_module_graph()) == []


def test_every_package_is_in_the_wheel_list():
    """Each package under quarry/ is named in pyproject's [tool.setuptools] packages (the wheel
    leaves out any that is not; tests/test_wheel.py then proves it on a built wheel, slowly)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "quarry").rglob("__init__.py")}
    assert found <= listed, f"missing from [tool.setuptools] packages: {sorted(found - listed)}"
