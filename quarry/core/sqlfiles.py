"""DuckDB SQL lives in ``sql/*.sql``; this loads a file by name.

The files are package data of ``quarry.sql`` (the repository's ``sql/`` folder, installed as
``quarry/sql/`` in the wheel) and are read through :mod:`importlib.resources`, so they are found
wherever the package is: a wheel, an editable install or a checkout.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable


def sql_files() -> Traversable:
    """The folder of ``.sql`` files as an :mod:`importlib.resources` traversable."""
    return files("quarry.sql")


def sql_names() -> list[str]:
    """Names (without ``.sql``) of every SQL file shipped with quarry."""
    return sorted(p.name[:-4] for p in sql_files().iterdir() if p.name.endswith(".sql"))


@cache
def load_sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return sql_files().joinpath(f"{name}.sql").read_text(encoding="utf-8")


def statements(name: str) -> list[str]:
    """The statements of a multi-statement file, split on ``;`` at line ends."""
    parts = [p.strip() for p in load_sql(name).split(";\n")]
    return [p.rstrip(";") for p in parts if p and not all(line.startswith("--") for line in p.splitlines())]
