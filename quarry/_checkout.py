"""Resolve ``quarry.flows``, ``quarry.tasks`` and ``quarry.sql`` in a plain checkout.

The repository keeps ``flows/``, ``tasks/`` and ``sql/`` at its top level (the project's layout);
the wheel installs them as ``quarry/flows``, ``quarry/tasks`` and ``quarry/sql`` (``package-dir``
in pyproject.toml), so nothing named ``tasks`` or ``flows`` lands in site-packages. setuptools'
editable install maps them the same way with a finder of its own, but a checkout used through
``PYTHONPATH`` (or ``python -m pytest`` from the repository root) has none. This finder does
that one mapping, for the ``quarry`` package it was imported with, and is installed only when
``quarry/`` holds no such subpackage itself: never in an installed wheel.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

SUBPACKAGES = ("flows", "tasks", "sql")


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``quarry.<name>`` in ``<root>/<name>/`` for the names in :data:`SUBPACKAGES`."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.partition(".")
        if parent != "quarry" or name not in SUBPACKAGES:
            return None
        init = self.root / name / "__init__.py"
        if not init.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])


def install(package_dir: Path) -> None:
    """Install the finder when ``package_dir`` (quarry/) sits in a checkout; a no-op otherwise."""
    root = package_dir.parent
    if any((package_dir / name).exists() for name in SUBPACKAGES):
        return  # an installed wheel: the subpackages are inside quarry/
    if not all((root / name / "__init__.py").is_file() for name in SUBPACKAGES):
        return
    if any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
        return
    # first, so that quarry.flows always comes from the checkout quarry itself came from, even
    # when an editable install of another checkout is on the path too
    sys.meta_path.insert(0, CheckoutFinder(root))
