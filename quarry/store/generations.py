"""Which committed generations a store keeps, so that ``quarry rollback`` can go back to them.

Every commit makes generation ``N``: ``catalog-N.duckdb``, ``index-N/`` and a LanceDB table
version (and, after it, ``fts-N.duckdb``: quarry/store/fts.py). A store keeps the last
``QUARRY_KEEP_GENERATIONS`` (default 2: the current one and the
one before it) — generations ``current - keep < N <= current`` — on a local disk and on object
storage alike; ``quarry maintain --keep-generations N`` prunes to another count. Anything newer
than the current generation is debris of a run that never committed.

Each catalog records the vector table and version it was committed with (meta ``vector_table``,
``vector_version``) and the pointer of the generation it replaced as that pointer last stood
(meta ``previous_pointer``: ``quarry maintain`` moves a current generation's pointer to a compacted
version, which its own catalog cannot know). :func:`state_of` puts the two together, so a kept
generation knows its whole state; the LanceDB versions of kept generations are never pruned
(:func:`kept_versions`), and a table a kept generation names is never dropped. A catalog from
before these keys cannot be rolled back to.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from quarry.core.environment import environment
from quarry.store import fts
from quarry.store.pointer import Pointer

__all__ = [
    "keep_generations",
    "generation_of",
    "kept",
    "kept_range",
    "local_generations",
    "remove_unkept",
    "committed_state",
    "state_of",
    "kept_versions",
    "layers_of",
    "referenced",
]

DEFAULT_KEEP = 2
_NAME = re.compile(r"^(?:catalog-(\d+)\.duckdb(?:\.rebase)?(?:\.wal)?|index-(\d+)(?:\.tmp-\d+)?)$")


def keep_generations() -> int:
    """How many committed generations a store keeps (``QUARRY_KEEP_GENERATIONS``, at least 1, default 2)."""
    return environment().keep_generations


def generation_of(name: str) -> int | None:
    """The generation a store file or folder belongs to (``catalog-000007.duckdb`` -> 7), else None."""
    m = _NAME.match(name)
    return int(m.group(1) or m.group(2)) if m else None


def kept(generation: int, current: int | None, keep: int) -> bool:
    """Whether ``generation`` is kept when ``current`` is committed and ``keep`` generations stay."""
    return current is not None and current - keep < generation <= current


def kept_range(current: int | None, keep: int) -> set[int]:
    """The generations kept when ``current`` is committed and ``keep`` generations stay."""
    return set() if current is None else set(range(max(1, current - keep + 1), current + 1))


def local_generations(store: Path) -> list[int]:
    """Generations with a catalog in the store folder, oldest first."""
    gens = {generation_of(p.name) for p in store.glob("catalog-*.duckdb")}
    return sorted(g for g in gens if g is not None)


def layers_of(store: Path, generation: int) -> tuple[int, ...]:
    """The generations whose catalog files (and index segments) generation ``generation`` reads,
    base first, itself last (quarry/store/layers.py): from its index manifest, else its catalog's
    ``meta.layers``; ``(generation,)`` for a whole catalog."""
    import json

    from quarry.retrieval import searchindex

    segments = searchindex.segment_generations(store / searchindex.folder_name(generation))
    if segments:
        return tuple(segments)
    meta = committed_state(store, generation) or {}
    try:
        chain = tuple(int(g) for g in json.loads(meta.get("layers") or "[]"))
    except (ValueError, TypeError):
        chain = ()
    return chain or (generation,)


def referenced(store: Path, current: int | None, keep: int | None = None) -> set[int]:
    """Generations whose files stay: the kept ones and every layer they read."""
    keep = keep_generations() if keep is None else keep
    if current is None:
        return set()
    out: set[int] = set()
    for gen in {*local_generations(store), current}:
        if kept(gen, current, keep):
            out.add(gen)
            out.update(layers_of(store, gen))
    return out


def remove_unkept(store: Path, current: int | None, keep: int | None = None) -> list[str]:
    """Delete catalogs, WALs and index folders of generations neither kept nor read by a kept one
    (:func:`referenced`), the half-written files and pointer files dead runs left; returns the
    names removed. The caller holds the writer lock.

    A reader that has an old catalog open keeps reading it: on POSIX an unlinked file lives until
    its last descriptor closes (and an unlinked index file until it is unmapped).
    """
    keep = keep_generations() if keep is None else keep
    stays = referenced(store, current, keep)
    removed = []
    for path in list(store.glob("catalog-*.duckdb*")) + list(store.glob("index-*")):
        gen = generation_of(path.name)
        staged = ".tmp-" in path.name or ".rebase" in path.name
        if gen is None or (not staged and current is not None and gen <= current and gen in stays):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    for path in store.glob(".CURRENT.*.tmp"):
        path.unlink(missing_ok=True)
    # full-text tables are of kept generations only (a layer under them is read through their catalog)
    removed += fts.remove_unkept(store, kept_range(current, keep), current)
    return sorted(removed)


def committed_state(store: Path, generation: int) -> dict[str, str] | None:
    """The meta of generation ``generation``'s catalog (``vector_table``, ``vector_version``,
    ``model``, ``dim``, ``committed_generation`` …), or None when it is not in the folder or
    cannot be read."""
    from quarry.store import catalog

    path = store / Pointer.catalog_name(generation)
    if not path.is_file():
        return None
    try:
        con = catalog.connect(path, read_only=True, fts=False)
    except Exception:  # noqa: BLE001 - held by another process, damaged: not a state we can vouch for
        return None
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    except Exception:  # noqa: BLE001 - an unreadable meta table: not a state we can vouch for
        return None
    finally:
        con.close()


def state_of(store: Path, generation: int, pointer) -> tuple[str, int] | None:
    """``(vector table, version)`` of generation ``generation`` as its pointer last named them, or
    None when nothing recorded it: the committed ``pointer`` for the current generation; for an
    older one, the ``previous_pointer`` the next generation's catalog recorded, else its own meta."""
    import json

    if pointer is not None and generation == pointer.generation:
        return (pointer.vector_table, pointer.vector_version) if pointer.vector_table else None
    later = committed_state(store, generation + 1) or {}
    try:
        previous = json.loads(later.get("previous_pointer") or "{}")
    except ValueError:
        previous = {}
    if previous.get("generation") == generation and previous.get("vector_table"):
        return previous["vector_table"], int(previous["vector_version"])
    meta = committed_state(store, generation) or {}
    table, version = meta.get("vector_table"), meta.get("vector_version", "")
    return (table, int(version)) if table and version.isdigit() else None


def kept_versions(store: Path, pointer, keep: int | None = None) -> dict[str, set[int]]:
    """LanceDB versions, by table, that kept generations name (:func:`state_of`). Pruning keeps these."""
    keep = keep_generations() if keep is None else keep
    out: dict[str, set[int]] = {}
    if pointer is None:
        return out
    for gen in {*local_generations(store), pointer.generation}:
        if not kept(gen, pointer.generation, keep):
            continue
        state = state_of(store, gen, pointer)
        if state is not None:
            out.setdefault(state[0], set()).add(state[1])
    return out
