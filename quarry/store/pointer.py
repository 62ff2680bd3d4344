"""A store's commit pointer, ``CURRENT``: the JSON naming the committed generation (its
catalog, its index folder and its LanceDB table version), read and written atomically on the
local folder. The lowest module of the store: it imports nothing of it, so the object-storage
side (:mod:`quarry.store.remote`) and the local layout (:mod:`quarry.store.layout`) both build on it."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from quarry.core.errors import StoreCorrupt
from quarry.core.safeio import fsync_dir

POINTER = "CURRENT"
DOCTOR_HINT = "run `quarry doctor --db {store}` to check the store and `--repair` what is repairable"


@dataclass(frozen=True)
class Pointer:
    """The committed state of a store."""

    generation: int
    catalog: str  # file name of the catalog, relative to the store
    vector_table: str  # LanceDB table name ("" before the first commit with vectors)
    vector_version: int  # committed LanceDB table version (0 = empty table)
    model: str
    dim: int
    committed_at: float

    @staticmethod
    def catalog_name(generation: int) -> str:
        return f"catalog-{generation:06d}.duckdb"


def read_pointer(store: Path) -> Pointer | None:
    """The committed pointer, or None when the store has never been committed."""
    path = store / POINTER
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreCorrupt(f"{path} cannot be read ({type(exc).__name__}): {DOCTOR_HINT.format(store=store)}") from exc
    try:
        pointer = Pointer(**json.loads(raw))
        if not isinstance(pointer.generation, int) or not isinstance(pointer.catalog, str) or "/" in pointer.catalog:
            raise ValueError("bad field types")
    except (ValueError, TypeError) as exc:  # truncated, edited by hand, or not JSON at all
        hint = DOCTOR_HINT.format(store=store)
        raise StoreCorrupt(f"{path} is damaged (not a valid commit pointer): {hint}") from exc
    return pointer


def write_local_pointer(store: Path, pointer: Pointer) -> None:
    """Atomically replace the local CURRENT file."""
    tmp = store / f".{POINTER}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(asdict(pointer), fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, store / POINTER)
    fsync_dir(store)
