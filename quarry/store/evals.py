"""Evaluation results and question sets kept with a store, outside its catalog generations.

An evaluation is written after a commit, by a reader (`quarry eval run`), about a generation that
is already committed and immutable. Writing it into that generation's catalog would need the writer
lock and a new generation (a catalog layer, a search index segment and a pointer move) for a few
hundred bytes, and a rollback would then erase the very measurement that justified it. So a store
keeps them beside its generations, like the run journal and the LLM cache:

- ``<store>/evals.jsonl``: one JSON line per (set, generation, settings) scored, appended under a
  flock; a line torn by a crash is skipped on read. Each row names the generation it scored, which
  only grows (a rollback writes a new one), so the history stays true across rollbacks and layers.
  ``quarry sql`` shows the rows as the temporary table ``evals`` (``sql/evals_table.sql``).
- ``<store>/evalsets/<name>.jsonl``: a question set, one question a line (its header, the method,
  seed and generation it was drawn from, in ``<name>.meta.json``).

On object storage both live in the store's local folder and are not uploaded.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path

from quarry.core.errors import NotFound, UsageError
from quarry.core.sqlfiles import load_sql, statements
from quarry.store.handle import Store, as_store

__all__ = ["EVALS", "SETS", "COLUMNS", "record", "rows", "save_set", "load_set", "list_sets", "set_path", "expose"]

EVALS = "evals.jsonl"
SETS = "evalsets"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _table_columns() -> list[str]:
    sql = load_sql("evals_table")
    create = sql[sql.index("CREATE") :]
    body = create[create.index("(\n") + 2 : create.rindex("\n)")]
    return [line.split()[0] for line in body.splitlines() if line.strip() and not line.strip().startswith("--")]


COLUMNS = tuple(_table_columns())  # the evals table's columns, read from sql/evals_table.sql


def _folder(store: Store | Path) -> Path:
    return as_store(store).folder


def record(store: Store | Path, row: dict) -> None:
    """Append one evaluation row (keys: :data:`COLUMNS`; JSON-able values) to the store's evals."""
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise AssertionError(f"evals row has columns the table lacks: {sorted(unknown)}")
    folder = _folder(store)
    folder.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(row, default=str, sort_keys=True) + "\n").encode()
    fd = os.open(folder / EVALS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def rows(store: Store | Path, set_name: str | None = None) -> list[dict]:
    """Every evaluation row of the store, oldest first (only ``set_name``'s when given)."""
    try:
        text = (_folder(store) / EVALS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:  # a line torn by a crash mid-append
            continue
        if isinstance(item, dict) and (set_name is None or item.get("set_name") == set_name):
            out.append(item)
    return out


def expose(con, store: Store | Path) -> None:
    """Create the temporary table ``evals`` on the connection ``con`` and fill it with the store's rows."""
    for stmt in statements("evals_table"):
        con.execute(stmt)
    items = rows(store)
    if items:
        insert = load_sql("evals_insert")
        values = []
        for item in items:
            values.append(
                [
                    json.dumps(item.get(c))
                    if c in ("settings", "metrics", "judge") and item.get(c) is not None
                    else item.get(c)
                    for c in COLUMNS
                ]
            )
        con.executemany(insert, values)


# --- question sets ---------------------------------------------------------------------------


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise UsageError(f"question set name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    return name


def set_path(store: Store | Path, name: str) -> Path:
    return _folder(store) / SETS / f"{check_name(name)}.jsonl"


def save_set(store: Store | Path, name: str, meta: dict, questions: list[dict]) -> Path:
    """Write a question set (replacing one of the same name): questions first, then its header."""
    path = set_path(store, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".jsonl.tmp-{os.getpid()}")
    tmp.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions), encoding="utf-8")
    os.replace(tmp, path)
    meta_path = path.with_suffix(".meta.json")
    meta_path.write_text(json.dumps({**meta, "name": name, "questions": len(questions)}, indent=2), encoding="utf-8")
    return path


def load_set(store: Store | Path | None, name_or_file: str) -> tuple[dict, list[dict]]:
    """A question set by its name in the store, or from a JSONL file: (header, questions)."""
    candidate = Path(name_or_file)
    if candidate.suffix == ".jsonl" and candidate.is_file():
        path, meta = candidate, {"name": candidate.stem}
        side = candidate.with_suffix(".meta.json")
        if side.is_file():
            meta = json.loads(side.read_text(encoding="utf-8"))
    else:
        if store is None:
            raise UsageError(f"no question set file {name_or_file}")
        path = set_path(store, name_or_file)
        if not path.is_file():
            known = ", ".join(s["name"] for s in list_sets(store)) or "none"
            raise NotFound(
                f"no question set {name_or_file!r} in {_folder(store)} (sets: {known}); "
                f"make one with `quarry eval generate`"
            )
        meta_path = path.with_suffix(".meta.json")
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {"name": name_or_file}
    questions = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"{path}:{lineno}: not valid JSON ({exc})") from None
        if not isinstance(item, dict) or not item.get("query") or not item.get("doc_id"):
            raise UsageError(f'{path}:{lineno}: a question needs "query" and "doc_id"')
        questions.append(item)
    return meta, questions


def list_sets(store: Store | Path) -> list[dict]:
    """The headers of the question sets stored with the store, by name."""
    folder = _folder(store) / SETS
    out = []
    for meta_path in sorted(folder.glob("*.meta.json")) if folder.is_dir() else []:
        try:
            out.append(json.loads(meta_path.read_text(encoding="utf-8")))
        except ValueError:
            continue
    return out
