"""``quarry maintain``: compact the vector table, rebuild stale LanceDB indices, merge the catalog
layers and search index segments into one, drop what the retention no longer keeps and check the
store — on a local store or one on object storage.

Every step runs under the writer lock (the lease on object storage), so it never races an index
run; a busy store is :class:`~quarry.core.errors.StoreLocked` (``if_busy="skip"``: the report says
``skipped``). Compaction and index rebuilds write new LanceDB versions: the pointer is moved to
the new version (same generation, same catalog and index files) before older versions are pruned,
so ``CURRENT`` never names a pruned version, even when the process dies between the two.

Each step is a plain function over the store path; ``quarry/tasks/maintain.py`` wraps them as
Prefect tasks and ``quarry/flows/maintain.py`` is the schedulable flow.
"""

from __future__ import annotations

import logging
import shutil
import time
import warnings
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb

from quarry.core.environment import environment
from quarry.core.errors import QuarryError, StoreLocked, StoreNotFound
from quarry.store import audit, vectors
from quarry.store import generations as gens
from quarry.store.generations import keep_generations
from quarry.store.handle import Store, as_store
from quarry.store.layout import WriterLock, write_pointer
from quarry.store.pointer import read_pointer

log = logging.getLogger("quarry")


def keep_versions() -> timedelta:
    """How long LanceDB versions stay: ``QUARRY_KEEP_VERSIONS_HOURS`` (default 24)."""
    return timedelta(hours=environment().keep_versions_hours)


def reindex_share() -> float:
    """Unindexed share of rows above which a LanceDB index is rebuilt: ``QUARRY_REINDEX_SHARE`` (0.2)."""
    return environment().reindex_share


def _committed(store: Store):
    pointer = read_pointer(store.folder)
    if pointer is None:
        raise StoreNotFound(f"no index at {store.folder}: run `quarry index PATH --db {store.folder}` first")
    return pointer


def _table(store: Store, pointer):
    """The vector table rolled back to the committed version (a dead run's versions undone)."""
    if not pointer.vector_table:
        return None
    return vectors.open_for_write(store, pointer.model, pointer.dim, pointer.vector_version)


def move_pointer(store: Store | Path, pointer, version: int):
    """Name ``version`` in CURRENT: same generation, no new files."""
    if version == pointer.vector_version:
        return pointer
    moved = replace(pointer, vector_version=version, committed_at=time.time())
    write_pointer(store, moved, upload=False)
    return moved


def compact(store: Store | Path, keep: timedelta | None = None, generations_kept: int | None = None) -> dict:
    """Merge fragments, move the pointer to the compacted version, then prune versions older than
    ``keep`` that no kept generation names. Caller holds the writer lock."""
    store = as_store(store)
    pointer = _committed(store)
    table = _table(store, pointer)
    if table is None:
        return {"fragments_before": 0, "fragments_after": 0, "versions_before": 0, "versions_after": 0}
    before = table.stats()["fragment_stats"]["num_fragments"]
    versions_before = len(table.list_versions())
    table.optimize(cleanup_older_than=vectors._NEVER)  # compaction and incremental index updates
    pointer = move_pointer(store, pointer, table.version)
    # versions the kept generations name stay, whatever their age: `quarry rollback` needs them
    kept = gens.kept_versions(store.folder, pointer, generations_kept).get(table.name, set())
    vectors.prune(table, keep if keep is not None else keep_versions(), keep_versions=kept)
    pointer = move_pointer(store, pointer, table.version)
    return {
        "fragments_before": before,
        "fragments_after": table.stats()["fragment_stats"]["num_fragments"],
        "versions_before": versions_before,
        "versions_after": len(table.list_versions()),
    }


def reindex(store: Store | Path, threshold: float | None = None) -> list[dict]:
    """Rebuild each LanceDB index whose unindexed share of rows is above ``threshold``."""
    store = as_store(store)
    threshold = reindex_share() if threshold is None else threshold
    pointer = _committed(store)
    table = _table(store, pointer)
    out: list[dict[str, Any]] = []
    if table is None:
        return out
    for idx in table.list_indices():
        indexed, unindexed = int(idx.num_indexed_rows or 0), int(idx.num_unindexed_rows or 0)
        share = unindexed / max(1, indexed + unindexed)
        rebuilt = share > threshold
        if rebuilt:
            column = idx.columns[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                if column == "vector":
                    table.create_index(
                        vector_column_name=column, metric="cosine", index_type=idx.index_type, replace=True
                    )
                else:
                    table.create_scalar_index(column, index_type=idx.index_type.upper(), replace=True)
            pointer = move_pointer(store, pointer, table.version)
        out.append(
            {
                "name": idx.name,
                "column": idx.columns[0],
                "type": idx.index_type,
                "unindexed_share": round(share, 4),
                "rebuilt": rebuilt,
            }
        )
    return out


def merge(store: Store | Path) -> dict:
    """Merge the current generation's catalog layers and index segments into one — a new
    generation holding a whole catalog and a one-segment index of the live rows — when it reads
    more than one layer or its segments hold deleted rows (quarry/store/layers.py). Searches are
    fastest on one segment; a commit merges only what its policy asks. Caller holds the writer lock."""
    from quarry.retrieval import searchindex
    from quarry.store import fts
    from quarry.store.writer import StoreWriter

    t0 = time.perf_counter()
    store = as_store(store)
    pointer = _committed(store)
    chain = pointer.layers or (pointer.generation,)
    manifest = searchindex.read_manifest(store.folder / searchindex.folder_name(pointer.generation)) or {}
    deleted = int((manifest.get("deleted") or {}).get("rows", 0))
    out = {
        "layers_before": len(chain),
        "deleted_rows_before": deleted,
        "merged": False,
        "generation": pointer.generation,
    }
    if not pointer.vector_table:
        return out
    recount = _boilerplate_stale(store, pointer)
    out["boilerplate_recounted"] = recount
    if len(chain) <= 1 and not deleted and not recount:
        return out
    # a merge changes no chunk: the new generation links the full-text tables the store had
    had_fts = fts.path(store.folder, pointer.generation).is_file()
    writer = StoreWriter(store, pointer.model, pointer.dim, duckdb_fts=had_fts).open()
    try:
        if len(chain) > 1 or deleted:
            writer.merge_all()
        # every chunk's boilerplate flag from scratch: lines no commit touched whose root's growth
        # moved the threshold under them (quarry/store/boilerplate.py)
        writer.recount_boilerplate = recount
        info = writer.commit(None, {})
    finally:
        writer.close()
    out.update(merged=True, generation=info.generation, seconds=round(time.perf_counter() - t0, 3))
    return out


def _boilerplate_stale(store: Store, pointer) -> bool:
    from quarry.store import boilerplate, layers

    con, folders = layers.connect(store.folder, pointer.generation, pointer.layers or None)
    try:
        return boilerplate.stale(con)
    except duckdb.Error:  # a catalog from before the column: the next commit computes every flag
        return False
    finally:
        con.close()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def remove_generations(store: Store | Path, keep: int | None = None) -> list[str]:
    """Delete catalog generations and index folders older than the last ``keep``
    (``QUARRY_KEEP_GENERATIONS``, default 2), locally and on object storage, and the vector tables
    no kept generation names."""
    store = as_store(store)
    pointer = _committed(store)
    keep = keep or keep_generations()
    removed = gens.remove_unkept(store.folder, pointer.generation, keep)
    removed += vectors.drop_unreferenced(store, set(gens.kept_versions(store.folder, pointer, keep)))
    remote = store.remote
    if remote is not None:
        removed += [str(remote.url.join(k)) for k in remote.remove_old_generations(pointer.generation, keep)]
    return removed


def check(store: Store | Path) -> dict:
    """``quarry doctor``'s checks, read-only."""
    from quarry.store.doctor import diagnose

    return diagnose(store).to_dict()


def full_text(store: Store | Path, generation: int, on: bool | None = None) -> dict:
    """DuckDB's full-text tables of ``generation`` (match_bm25 in quarry sql), built unless there
    (quarry/store/fts.py; after the writer lock is released: a run may commit meanwhile), when
    ``on`` (default: ``QUARRY_DUCKDB_FTS``) and the extension is installed; their ``build`` row."""
    from quarry.core.settings import Settings
    from quarry.store import fts

    store = as_store(store)
    if not (Settings.from_env().duckdb_fts if on is None else on):
        return {"state": "off"}
    if not fts.available():
        return {"state": "unavailable"}
    built_here = not fts.path(store.folder, generation).is_file()
    try:
        fts.ensure(store.folder, generation)
    except QuarryError as exc:  # the store stands; the first match_bm25 query tries again
        log.warning("%s", exc)
        return {"state": "missing", "error": str(exc)}
    return {"state": "ready", "built": built_here, "build": fts.build_info(store.folder, generation)}


def audit_facts(report: dict) -> dict:
    """What the audit log keeps of a maintenance run: the generation and what was removed, counted."""
    return {
        "generation": report.get("generation"),
        "files_removed": len(report.get("removed") or []),
        "layers_before": report["merge"]["layers_before"],
        "merged": bool(report["merge"]["merged"]),
        "versions_before": report["compaction"]["versions_before"],
        "versions_after": report["compaction"]["versions_after"],
        "healthy": report["check"]["healthy"],
    }


def maintain(
    store: Store | Path,
    generations: int | None = None,
    keep: timedelta | None = None,
    threshold: float | None = None,
    if_busy: str = "fail",
    full_text_on: bool | None = None,
) -> dict:
    """All of it, in order, under the writer lock; then DuckDB's full-text tables of the current
    generation (:func:`full_text`) and the consistency check, after the lock is released."""
    t0 = time.perf_counter()
    store = as_store(store)
    try:
        lock = WriterLock(store).acquire()
    except StoreLocked as exc:
        if if_busy != "skip":
            raise
        return {"store": str(store.folder), "status": "skipped", "reason": str(exc)}
    try:
        report: dict[str, Any] = {"store": store.name, "status": "completed"}
        report["compaction"] = compact(store, keep, generations)
        report["indices"] = reindex(store, threshold)
        report["merge"] = merge(store)
        report["removed"] = remove_generations(store, generations or keep_generations())
        report["generation"] = _committed(store).generation
    finally:
        lock.release()
    report["full_text"] = full_text(store, report["generation"], full_text_on)
    report["check"] = check(store)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    audit.record(store, "maintain", audit_facts(report))
    log.info(
        "maintain: %d fragments -> %d, %d versions -> %d, %d indices rebuilt, %d catalog layers -> %d, "
        "%d files removed, healthy %s",
        report["compaction"]["fragments_before"],
        report["compaction"]["fragments_after"],
        report["compaction"]["versions_before"],
        report["compaction"]["versions_after"],
        sum(i["rebuilt"] for i in report["indices"]),
        report["merge"]["layers_before"],
        1 if report["merge"]["merged"] else report["merge"]["layers_before"],
        len(report["removed"]),
        report["check"]["healthy"],
    )
    return report
