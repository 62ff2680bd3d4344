"""quarry as a package: the wheel's contents, and the wheel installed the way a worker image is
built (``pip install --no-deps -r requirements.lock``, then ``pip install --no-deps`` the wheel)
answering like the checkout, from a directory outside it (slow: a fresh venv).

The fresh venv takes its dependencies from .venv's site-packages, through a ``.pth`` line: .venv
is that same lock installed the same way (``make setup``, from scratch on every CI run), and
unpacking its 1.4 GB again cost this test 2-3 minutes. Only the wheel is installed into it. A
path line in a ``.pth`` file adds the directory alone, never the ``.pth`` files inside it, so
the checkout's editable install of quarry stays out of the venv (the tests check where quarry is
imported from)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE

pytestmark = pytest.mark.slow

QUERY = "roll back a deploy"


def _run(args, **kw):
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def _clean_env(**extra) -> dict:
    """The environment of a user outside the checkout: no PYTHONPATH, no test Prefect server."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PREFECT_API_URL", "QUARRY_EMBED_BACKEND", "VIRTUAL_ENV")
    }
    return {**env, **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # setuptools copies into build/lib and never removes from it: a file the checkout deleted (an
    # SQL file merged into another) would ship from an earlier build's leftovers
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, ROOT], timeout=300
    )
    (whl,) = out.glob("quarry-*.whl")
    return whl


def _checkout_packages() -> set[str]:
    """Every package the wheel must hold, as paths inside it."""
    inside = {
        str(p.parent.relative_to(ROOT)) for p in (ROOT / "quarry").rglob("__init__.py") if "__pycache__" not in p.parts
    }
    return inside | {"quarry/flows", "quarry/tasks", "quarry/sql"}


def test_wheel_holds_quarry_only_with_its_sql_and_every_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"quarry"}
    shipped_sql = sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("quarry/sql/") and n.endswith(".sql"))
    assert shipped_sql == sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    packages = {n.rsplit("/", 1)[0] for n in names if n.endswith("/__init__.py")}
    assert _checkout_packages() <= packages, (
        f"missing from [tool.setuptools] packages: {_checkout_packages() - packages}"
    )
    assert "quarry/py.typed" in names and "quarry/__main__.py" in names
    assert "quarry/flows/index.py" in names and "quarry/tasks/embed.py" in names
    from quarry.flows.orchestration import _shipped

    assert f"quarry/flows/{_shipped().name}" in names  # the empty Prefect database a first store copies
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    default = [r for r in requires if "extra ==" not in r]
    assert not any(r.split()[1].lower().startswith(("torch", "sentence-transformers")) for r in default), default
    assert any("torch" in r and 'extra == "torch"' in r for r in requires), requires


@pytest.fixture(scope="module")
def wheel_venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    _run([sys.executable, "-m", "venv", venv], timeout=300)
    site = _site_packages(venv / "bin" / "python")
    (Path(site) / "_quarry_test_lock.pth").write_text(_site_packages(sys.executable) + "\n")
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", wheel], timeout=300, env=_clean_env())
    return venv


def _site_packages(python) -> str:
    return _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()


def test_the_lock_has_no_torch(wheel_venv):
    done = subprocess.run([wheel_venv / "bin" / "python", "-c", "import torch"], capture_output=True, text=True)
    assert done.returncode != 0


def test_installed_wheel_answers_like_the_checkout(wheel_venv, tmp_path):
    """index, status and search from outside the checkout, with the default backend built into an
    empty model cache; the same search from the checkout finds the same chunks."""
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(SAMPLE, elsewhere / "sample")
    env = _clean_env(QUARRY_CACHE_DIR=str(tmp_path / "model-cache"), HF_HUB_OFFLINE="1")
    quarry = wheel_venv / "bin" / "quarry"

    where = _run(
        [
            wheel_venv / "bin" / "python",
            "-c",
            "import quarry, quarry.flows.index as f, quarry.core.sqlfiles as s;"
            "print(quarry.__file__); print(f.__file__); print(len(s.sql_names()))",
        ],
        cwd=elsewhere,
        env=env,
    ).stdout.split()
    assert all(p.startswith(str(wheel_venv)) for p in where[:2]), where
    assert int(where[2]) == len(list((ROOT / "sql").glob("*.sql")))

    _run([quarry, "index", "sample", "--db", "store"], cwd=elsewhere, env=env, timeout=900)
    status = json.loads(_run([quarry, "status", "--db", "store", "--json"], cwd=elsewhere, env=env).stdout)
    assert status["documents"] == len([p for p in SAMPLE.rglob("*") if p.is_file()])
    assert status["model"] == "all-MiniLM-L6-v2"
    assert status["embedder"]["backend"] == "onnx-int8" and status["embedder"]["variant"]
    wheel_hits = json.loads(
        _run([quarry, "search", QUERY, "--db", "store", "--json", "-k", "5"], cwd=elsewhere, env=env).stdout
    )["results"]

    # the checkout, same tree, same model cache
    checkout_env = {**env, "PYTHONPATH": str(ROOT)}
    _run(
        [sys.executable, "-m", "quarry", "index", elsewhere / "sample", "--db", tmp_path / "checkout-store"],
        cwd=ROOT,
        env=checkout_env,
        timeout=900,
    )
    checkout_hits = json.loads(
        _run(
            [sys.executable, "-m", "quarry", "search", QUERY, "--db", tmp_path / "checkout-store", "--json", "-k", "5"],
            cwd=ROOT,
            env=checkout_env,
        ).stdout
    )["results"]
    assert wheel_hits and [h["chunk_id"] for h in wheel_hits] == [h["chunk_id"] for h in checkout_hits]
    assert [Path(h["path"]).name for h in wheel_hits] == [Path(h["path"]).name for h in checkout_hits]


def test_prefect_deployment_entrypoint_loads_from_the_installed_package(wheel_venv, tmp_path):
    """prefect.yaml's entrypoint, as a worker with the wheel installed resolves it."""
    import yaml

    entrypoint = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"][0]["entrypoint"]
    probe = (
        "import sys\nfrom prefect.flows import load_flow_from_entrypoint\n"
        "flow = load_flow_from_entrypoint(sys.argv[1], use_placeholder_flow=False)\n"
        "import inspect; print(flow.name, inspect.getsourcefile(flow.fn))\n"
    )
    out = _run(
        [wheel_venv / "bin" / "python", "-c", probe, entrypoint],
        cwd=tmp_path,
        env=_clean_env(PREFECT_HOME=str(tmp_path / "prefect")),
    ).stdout.split()
    assert out[0] == "quarry-index", out
    assert out[1].startswith(str(wheel_venv)), out
