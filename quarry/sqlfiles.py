"""DuckDB SQL lives in ``sql/*.sql``; this loads a file by name."""

from __future__ import annotations

from functools import cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"


@cache
def load_sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return (SQL_DIR / f"{name}.sql").read_text(encoding="utf-8")


def statements(name: str) -> list[str]:
    """The statements of a multi-statement file, split on ``;`` at line ends."""
    parts = [p.strip() for p in load_sql(name).split(";\n")]
    return [p.rstrip(";") for p in parts if p and not all(line.startswith("--") for line in p.splitlines())]
