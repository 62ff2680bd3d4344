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


# A file that writes either a whole catalog's tables or a delta layer's own (quarry/store/layers.py)
# names them ``{schema}.documents`` and so on; the schema is an identifier, which a bound parameter
# cannot be, so it is put in here, and only one of these.
SCHEMAS = ("main", "layer")


@cache
def load_sql(name: str, schema: str = "main") -> str:
    """The text of ``sql/<name>.sql``, its ``{schema}`` tables in ``schema`` (:data:`SCHEMAS`:
    ``main`` for a whole catalog, ``layer`` for a delta layer's own tables)."""
    if schema not in SCHEMAS:
        raise ValueError(f"sql/{name}.sql: no schema {schema!r}, one of {SCHEMAS}")
    return sql_files().joinpath(f"{name}.sql").read_text(encoding="utf-8").replace("{schema}", schema)


def in_schema(name: str) -> bool:
    """Whether ``sql/<name>.sql`` writes tables of either schema (see :func:`load_sql`)."""
    return "{schema}" in sql_files().joinpath(f"{name}.sql").read_text(encoding="utf-8")


def statements(name: str, schema: str = "main") -> list[str]:
    """The statements of a multi-statement file, split on ``;`` at line ends (``schema`` as for
    :func:`load_sql`)."""
    parts = [p.strip() for p in load_sql(name, schema).split(";\n")]
    return [p.rstrip(";") for p in parts if p and not all(line.startswith("--") for line in p.splitlines())]
