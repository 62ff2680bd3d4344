"""``quarry rollback``: make an earlier committed generation current again, atomically.

A rollback is a commit like an index run's: under the writer lock (the lease on object storage)
it writes generation ``current + 1`` whose state is the target generation's — a catalog layer over
the target's layers holding nothing but the run history (quarry/store/layers.py), an index of the
target's segments and deletions, its LanceDB table version restored as a new version — and moves
``CURRENT`` to it with the same pointer commit (an atomic rename locally; create-only uploads
and a conditional put on object storage). Generation numbers only grow, so a rollback can itself
be rolled back, and readers never see a file change under a name they know.

The run history is not rolled back: the new catalog's ``runs`` table holds every run of the
generation it replaces (and the journal's), plus one ``rollback`` row saying what happened.

How far back: the generations the store keeps (quarry/store/generations.py; by default the
current one and the one before it; ``QUARRY_KEEP_GENERATIONS`` keeps more). A generation committed
before catalogs recorded their vector version cannot be a target.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quarry.core.errors import QuarryError, UsageError
from quarry.core.models import RunReport
from quarry.store import audit, generations, journal, layers, vectors
from quarry.store.handle import Store, as_store
from quarry.store.layout import WriterLock, new_run_id, require_pointer, write_pointer
from quarry.store.pointer import Pointer

__all__ = ["rollback", "list_generations"]


def list_generations(store: Store | Path) -> list[dict]:
    """The generations a rollback can go to (and the current one), newest first: number, when it was
    committed, its documents and chunks, the run that made it, and whether it can be a target."""
    opened = as_store(store)
    store, remote = opened.folder, opened.remote
    pointer = require_pointer(opened)
    numbers = set(generations.local_generations(store)) | (remote.generations() if remote is not None else set())
    keep = generations.keep_generations()
    out = []
    for gen in sorted(numbers, reverse=True):
        if gen > pointer.generation or not generations.kept(gen, pointer.generation, keep):
            continue
        if remote is not None:
            remote.fetch_generation(store, gen)
        out.append({"generation": gen, "current": gen == pointer.generation, **_describe(store, gen)})
    return out


def _describe(store: Path, gen: int) -> dict[str, Any]:
    info: dict[str, Any] = {"documents": None, "chunks": None, "last_run": None, "committed": None, "restorable": False}
    try:
        con, private = layers.connect(store, gen, generations.layers_of(store, gen))
    except Exception as exc:  # noqa: BLE001 - whatever stops the open is why this generation is not restorable
        info["why_not"] = f"its catalog cannot be opened: {str(exc).splitlines()[0][:160]}"
        return info
    try:
        info["documents"], info["chunks"] = con.execute(
            "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks)"
        ).fetchone()
        last = con.execute(
            "SELECT run_id, status, finished FROM runs WHERE status <> 'skipped' ORDER BY started DESC LIMIT 1"
        ).fetchone()
        if last:
            info["last_run"], info["last_status"] = last[0], last[1]
            info["committed"] = last[2].isoformat() + "Z" if last[2] else None
    finally:
        con.close()
        for folder in private:
            shutil.rmtree(folder, ignore_errors=True)
    if generations.state_of(store, gen, require_pointer(store)) is not None:
        info["restorable"] = True
    else:
        info["why_not"] = "committed by an older quarry, which did not record its vector version"
    return info


def rollback(store: Store | Path, to: int | None = None) -> dict:
    """Make generation ``to`` (default: the newest kept generation before the current one) current
    again, as a new generation; returns the ``rollback`` run row plus ``generation`` (the new one),
    ``from_generation`` and ``to_generation``. Raises :class:`~quarry.core.errors.StoreLocked` while
    an index run holds the store, :class:`UsageError` for a generation it cannot go to."""
    store = as_store(store)
    lock = WriterLock(store).acquire()  # on object storage: the lease, and a pull of CURRENT
    try:
        report = _rollback(store, to)
    finally:
        lock.release()
    audit.record(
        store,
        "rollback",
        {
            "run_id": report.get("run_id"),
            "from_generation": report["from_generation"],
            "to_generation": report["to_generation"],
            "generation": report["generation"],
        },
    )
    return report


def _rollback(opened: Store, to: int | None) -> dict:
    started = datetime.now(UTC).replace(tzinfo=None)
    t0 = time.perf_counter()
    store, remote = opened.folder, opened.remote
    current = require_pointer(opened)
    keep = generations.keep_generations()
    available = set(generations.local_generations(store)) | (remote.generations() if remote is not None else set())
    older = sorted(g for g in available if g < current.generation and generations.kept(g, current.generation, keep))
    if to is None:
        if not older:
            raise UsageError(
                f"no earlier generation to roll back to: the store keeps {keep} generation"
                f"{'s' if keep != 1 else ''} (QUARRY_KEEP_GENERATIONS) and generation "
                f"{current.generation} is the only one left"
            )
        to = older[-1]
    if to == current.generation:
        raise UsageError(f"generation {to} is already the current one")
    if to not in older:
        kept_list = ", ".join(map(str, older)) or "none"
        raise UsageError(
            f"generation {to} is not kept (kept earlier generations: {kept_list}; the store keeps "
            f"the last {keep}, QUARRY_KEEP_GENERATIONS)"
        )
    if remote is not None:
        for gen in (to, to + 1):  # the next generation's catalog records the target's last pointer
            remote.fetch_generation(store, gen)
    meta = generations.committed_state(store, to) or {}
    state = generations.state_of(store, to, current)
    if state is None:
        raise UsageError(
            f"generation {to} was committed by an older quarry, which did not record its vector "
            "version: it cannot be restored"
        )
    table_name, version = state
    new = current.generation + 1
    target = store / Pointer.catalog_name(new)
    folder = None
    private: list[Path] = []
    try:
        from quarry.retrieval import searchindex

        source_index = store / searchindex.folder_name(to)
        chain = generations.layers_of(store, to)
        # A delta layer over the target's layers: no catalog is copied, the index segments are
        # shared. A target this quarry cannot build on (an older quarry's) is copied whole.
        con, new_chain, private, _ = layers.open_over(
            store, to, chain, new, delta=searchindex.is_complete(source_index)
        )
        try:
            table = vectors.connect(opened).open_table(table_name)
            try:
                table.restore(version)
            except Exception as exc:
                raise QuarryError(
                    f"generation {to}'s vectors ({table_name} version {version}) are gone from the "
                    f"vector table ({str(exc).splitlines()[0][:160]}); it cannot be restored"
                ) from exc
            for key, value in (
                ("committed_generation", str(new)),
                ("vector_table", table_name),
                ("vector_version", str(table.version)),
                ("previous_pointer", json.dumps(asdict(current))),
            ):
                layers.set_any_meta(con, key, value)
            folder = _index_files(store, to, new, con, table, meta, new_chain)
            report = _history(opened, con, current, new, to, started, t0)
            con.execute("CHECKPOINT")
        finally:
            con.close()
            for path in private:
                shutil.rmtree(path, ignore_errors=True)
        pointer = Pointer(
            generation=new,
            catalog=target.name,
            vector_table=table_name,
            vector_version=table.version,
            model=meta.get("model", current.model),
            dim=int(meta.get("dim") or current.dim),
            committed_at=time.time(),
            layers=new_chain,
        )
        write_pointer(opened, pointer)  # <- the commit point
    except BaseException:
        for suffix in ("", ".wal"):
            Path(str(target) + suffix).unlink(missing_ok=True)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    journal.forget(report.pop("_claimed"))
    from quarry.store.upkeep import after_commit

    after_commit(opened, pointer, table)
    return {**report, "generation": new, "from_generation": current.generation, "to_generation": to}


def _index_files(store: Path, source_gen: int, new: int, con, table, meta: dict, chain: tuple) -> Path:
    """``index-<new>/``: the target's segments and deletions with an empty segment of the new layer's
    own, or a whole index rebuilt when the target has none this quarry can build on."""
    from quarry.retrieval import searchindex

    source = store / searchindex.folder_name(source_gen)
    folder = store / searchindex.folder_name(new)
    model, dim = meta.get("model", ""), int(meta.get("dim") or 0)
    if len(chain) > 1:
        index = searchindex.SearchIndex.load(source)
        searchindex.build_into(
            folder,
            con,
            None,
            model,
            dim,
            source=layers.LAYER,
            generation=new,
            earlier=index.segments,
            deleted_rows=index.bm25.deleted,
            deleted_docs=index.cards.bm25.deleted if index.cards else None,
        )
    else:
        from functools import partial

        searchindex.build_into(folder, con, partial(vectors.read_in_row_order, table), model, dim, generation=new)
    return folder


def _history(opened: Store, con, current: Pointer, new: int, to: int, started: datetime, t0: float) -> dict:
    """Carry the replaced generation's runs (and the journal's) into the new catalog, then add the
    rollback's own row; returns that row (with the claimed journal files under ``_claimed``)."""
    from quarry.store.catalog_writes import insert_run
    from quarry.store.reader import open_snapshot

    snap = open_snapshot(opened.folder)
    try:
        cur = snap.con.execute("SELECT * FROM runs")
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        snap.close()
    known = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    for row in rows:
        if row["run_id"] not in known:
            insert_run(con, row)
    journal_rows, claimed = journal.claim(opened, new)
    journal.merge(con, journal_rows, insert_run)
    message = (
        f"rolled back from generation {current.generation} to the state of generation {to} "
        f"(committed as generation {new})"
    )
    report = RunReport(
        run_id=new_run_id(),
        started=started,
        status="rollback",
        settings={"from_generation": current.generation, "to_generation": to, "generation": new},
        message=message,
    ).finished_with(commit_seconds=time.perf_counter() - t0)
    insert_run(con, report)
    return {**report.to_dict(), "_claimed": claimed}
