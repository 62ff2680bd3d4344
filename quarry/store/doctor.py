"""``quarry doctor``: check that a store's pointer, catalog, vectors and index files agree, and
repair what can be repaired without guessing.

A generation's catalog may be a layer over earlier catalog files and its index several segments
(quarry/store/layers.py, quarry/retrieval/searchindex.py): the checks open the catalog with its
layers attached, name them, and count the index's live rows over all its segments; a missing
layer is a missing catalog.

What is repairable, and how:

- ``CURRENT`` missing or damaged: the pointer is rebuilt from the newest catalog generation that
  a commit finished (``meta.committed_generation``, written by the commit itself) and the newest
  LanceDB version of its model's table whose chunk ids equal the catalog's. Nothing is adopted
  unless catalog and vectors agree row for row.
- ``index-<gen>/`` missing, incomplete (a segment it names missing) or of another size than the
  catalog: rebuilt from the catalog and the vectors as one segment of every live row, as a
  commit of a whole catalog builds it (the next index run then writes a whole catalog too).
- files no pointer names (a dead run's catalog generation or index folder) and generations past the
  retention that no kept generation reads: removed.

Not repairable (the data is gone): the committed catalog file missing or unreadable, or vectors
that disagree with it. Then the report says to rebuild from the source files with
``quarry index PATH --db STORE --full`` after moving the damaged store aside.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from quarry.core.errors import StoreCorrupt
from quarry.store.handle import Store, as_store

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

    from quarry.store.pointer import Pointer

__all__ = ["Finding", "DoctorReport", "diagnose"]

_GENERATION = re.compile(r"^catalog-(\d{6,})\.duckdb$")


@dataclass
class Finding:
    """One check: what was checked, whether it holds, what is wrong, and what was (or would be) done."""

    check: str
    ok: bool
    detail: str = ""
    repair: str = ""
    repaired: bool = False
    repairable: bool = False  # whether `quarry doctor --repair` can fix it (else ``repair`` says what can)


@dataclass
class DoctorReport:
    store: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(f.ok or f.repaired for f in self.findings)

    @property
    def repairable(self) -> bool:
        """Whether ``--repair`` would fix something still wrong."""
        return any(not f.ok and not f.repaired and f.repairable for f in self.findings)

    def add(self, check: str, ok: bool, detail: str = "", repair: str = "", repairable: bool = False) -> Finding:
        finding = Finding(check, ok, detail, repair, repairable=repairable)
        self.findings.append(finding)
        return finding

    def to_dict(self) -> dict:
        return {
            "store": self.store,
            "healthy": self.healthy,
            "repairable": self.repairable,
            "findings": [asdict(f) for f in self.findings],
        }


def _rebuild_hint(store: Path) -> str:
    return f"move {store} aside and rebuild it from the source files: quarry index PATH --db {store} --full"


def diagnose(store: Store | Path, repair: bool = False) -> DoctorReport:
    """Check ``store``; with ``repair``, fix what is safely repairable (takes the writer lock)."""
    from quarry.store.layout import WriterLock

    opened = as_store(store)
    store = opened.folder
    report = DoctorReport(str(store))
    if not store.is_dir():
        report.add(
            "store",
            False,
            f"{store} does not exist" if not store.exists() else f"{store} is not a directory",
            "nothing to check: index into it first, `quarry index PATH --db STORE`",
        )
        return report
    if opened.remote is not None and not repair:  # the writer lock pulls when repairing
        opened.remote.pull(store)
    lock = WriterLock(opened).acquire() if repair else None
    try:
        _diagnose(opened, report, repair)
    finally:
        if lock is not None:
            lock.release()
    return report


def _diagnose(opened: Store, report: DoctorReport, repair: bool) -> None:
    from quarry.store.layout import write_pointer
    from quarry.store.pointer import POINTER, read_pointer

    store = opened.folder

    try:
        pointer = read_pointer(store)
        if pointer is None:
            if not list(store.glob("catalog-*.duckdb")):
                report.add(
                    "pointer",
                    False,
                    f"{store / POINTER} is missing and there is no catalog",
                    "not a quarry store (or nothing was ever committed): run `quarry index`",
                )
                return
            raise StoreCorrupt(f"{store / POINTER} is missing")
        report.add("pointer", True, f"{store / POINTER}: generation {pointer.generation}")
    except StoreCorrupt as exc:
        found = recover_pointer(store)
        finding = report.add(
            "pointer",
            False,
            str(exc).split(": run `quarry doctor")[0],
            f"rewrite CURRENT to generation {found.generation} (catalog and vectors agree)"
            if found
            else "no finished generation whose vectors agree: " + _rebuild_hint(store),
            repairable=found is not None,
        )
        if found is None:
            return
        if repair:
            write_pointer(opened, found)
            finding.repaired = True
        pointer = found

    catalog_path = store / pointer.catalog
    attached = _open_catalog(catalog_path, report, pointer)
    if attached is None:
        return
    con, private = attached
    try:
        try:
            chunk_ids = {r[0] for r in con.execute("SELECT chunk_id FROM chunks").fetchall()}
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        except Exception as exc:  # noqa: BLE001 - the doctor reports whatever stops the read
            report.add("catalog", False, f"{catalog_path} cannot be read: {_line(exc)}", _rebuild_hint(store))
            return
        chain = pointer.layers or (pointer.generation,)
        layered = (
            f" (a layer over {', '.join(f'catalog-{g:06d}.duckdb' for g in chain[:-1])})" if len(chain) > 1 else ""
        )
        report.add("catalog", True, f"{catalog_path.name}{layered}: {len(chunk_ids)} chunks")
        _check_vectors(store, pointer, chunk_ids, meta, report)
        _check_index(store, pointer, con, len(chunk_ids), report, repair)
    finally:
        con.close()
        import shutil

        for folder in private:
            shutil.rmtree(folder, ignore_errors=True)
    _check_stale(store, pointer, report, repair)


def _open_catalog(path: Path, report: DoctorReport, pointer: Pointer) -> tuple[DuckDBPyConnection, list[Path]] | None:
    """``(connection, private copy folders)`` — the generation's catalog with the layers it reads
    attached — or None after a finding that says why not. Another process holding a file read-write
    is named, and the check goes on with a private copy: that is a SQL client's lock, not damage."""
    import duckdb

    from quarry.store import layers
    from quarry.store.catalog import lock_holder

    if not path.exists():
        report.add("catalog", False, f"{path}, the catalog CURRENT names, is missing", _rebuild_hint(path.parent))
        return None
    try:
        con, private = layers.connect(path.parent, pointer.generation, pointer.layers or None)
    except duckdb.IOException as exc:
        if lock_holder(exc):  # a copy failed too (a full disk): still a lock, never damage
            report.add(
                "catalog lock",
                False,
                f"{path.name} is held open read-write by {lock_holder(exc)}",
                "close that connection, or open the file read-only (duckdb -readonly FILE)",
            )
            return None
        report.add("catalog", False, f"{path} cannot be opened: {_line(exc)}", _rebuild_hint(path.parent))
        return None
    except Exception as exc:  # noqa: BLE001 - the doctor reports whatever stops the open
        report.add("catalog", False, f"{path} cannot be opened: {_line(exc)}", _rebuild_hint(path.parent))
        return None
    if private:
        files = dict.fromkeys([path, *(path.parent / f"{layers.alias(g)}.duckdb" for g in pointer.layers or ())])
        held = [f"{f.name} is held open read-write by {who}" for f in files if (who := _holder_of(f))]
        report.add(
            "catalog lock",
            True,
            "; ".join(held or [f"{path.name} (or a layer it reads) is held open read-write by another process"])
            + "; quarry reads a private copy meanwhile. Close that connection, or open the file "
            "read-only (duckdb -readonly FILE)",
        )
    return con, private


def _holder_of(path: Path) -> str | None:
    """The process holding ``path`` read-write (``PID 5072 (/usr/bin/python3)``), or None."""
    import duckdb

    from quarry.store.catalog import lock_holder

    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.IOException as exc:
        return lock_holder(exc)
    except Exception:  # noqa: BLE001 - only a lock is worth naming here; the open's own check reports the rest
        return None
    return None


def _chunk_ids_at(store: Path, name: str, version: int) -> set[str]:
    from quarry.store import vectors

    table = vectors.open_for_read(store, name, version)
    rows = table.search().select(["chunk_id"]).limit(None).to_arrow()
    return set(rows.column("chunk_id").to_pylist())


def _check_vectors(store: Path, pointer, chunk_ids: set[str], meta: dict, report: DoctorReport) -> None:
    if meta.get("model") and (meta.get("model"), meta.get("dim")) != (pointer.model, str(pointer.dim)):
        report.add(
            "vectors",
            False,
            f"CURRENT names model {pointer.model}/{pointer.dim}, the catalog {meta.get('model')}/{meta.get('dim')}",
            _rebuild_hint(store),
        )
        return
    if not pointer.vector_table:
        report.add(
            "vectors",
            not chunk_ids,
            "no vector table" + (f" for {len(chunk_ids)} chunks" if chunk_ids else ""),
            "" if not chunk_ids else _rebuild_hint(store),
        )
        return
    try:
        stored = _chunk_ids_at(store, pointer.vector_table, pointer.vector_version)
    except Exception as exc:  # noqa: BLE001 - the doctor reports whatever stops the read
        report.add(
            "vectors",
            False,
            f"{store / 'lance' / (pointer.vector_table + '.lance')} version "
            f"{pointer.vector_version} cannot be read: {_line(exc)}",
            _rebuild_hint(store),
        )
        return
    if stored != chunk_ids:
        report.add(
            "vectors",
            False,
            f"{len(chunk_ids - stored)} chunks have no vector, {len(stored - chunk_ids)} vectors have no chunk",
            _rebuild_hint(store),
        )
        return
    report.add("vectors", True, f"{pointer.vector_table} v{pointer.vector_version}: {len(stored)} vectors match")


def _check_index(store: Path, pointer, con, n_chunks: int, report: DoctorReport, repair: bool) -> None:
    import json

    from quarry.retrieval import searchindex

    folder = store / searchindex.folder_name(pointer.generation)
    try:
        rows = json.loads((folder / searchindex.MANIFEST).read_text(encoding="utf-8")).get("rows")
    except (OSError, ValueError):
        rows = None
    manifest = searchindex.read_manifest(folder)
    complete = manifest is not None and (manifest.get("version") == 2 or searchindex.is_complete(folder))
    if complete and rows == n_chunks:
        segments = searchindex.segment_generations(folder)
        detail = (
            f" in {len(segments)} segments ({', '.join(searchindex.folder_name(g) for g in segments)})"
            if len(segments) > 1
            else ""
        )
        report.add("index", True, f"{folder.name}: {rows} rows{detail}")
        return
    why = "missing or incomplete" if rows is None or not complete else f"holds {rows} rows, the catalog {n_chunks}"
    finding = report.add(
        "index", False, f"{folder} {why}", "rebuild the index files from catalog and vectors", repairable=True
    )
    if repair:
        from quarry.store import vectors

        table = (
            vectors.open_for_read(store, pointer.vector_table, pointer.vector_version) if pointer.vector_table else None
        )
        stored = partial(vectors.read_in_row_order, table) if table is not None else None
        # one segment of every live row (the next index run builds on it with a whole catalog)
        searchindex.build_into(folder, con, stored, pointer.model, pointer.dim, generation=pointer.generation)
        finding.repaired = True


def _check_stale(store: Path, pointer, report: DoctorReport, repair: bool) -> None:
    from quarry.store import generations

    keep = generations.keep_generations()
    stays = generations.referenced(store, pointer.generation, keep)
    stale = sorted(
        p.name
        for p in list(store.glob("catalog-*.duckdb*")) + list(store.glob("index-*"))
        if (gen := generations.generation_of(p.name)) is not None
        and (".tmp-" in p.name or ".rebase" in p.name or gen > pointer.generation or gen not in stays)
    )
    if not stale:
        return
    finding = report.add(
        "stale files",
        False,
        f"left by runs that never committed or past the retention of "
        f"{keep} generations (and the layers they read): {', '.join(stale)}",
        "remove them (the next index run would too)",
        repairable=True,
    )
    if repair:
        generations.remove_unkept(store, pointer.generation, keep)
        finding.repaired = True


def recover_pointer(store: Path):
    """A pointer for the newest finished generation whose vectors agree with it, or None."""
    import os
    import shutil

    from quarry.store import layers, vectors
    from quarry.store.pointer import Pointer

    gens = sorted(
        ((int(m.group(1)), p) for p in store.glob("catalog-*.duckdb") if (m := _GENERATION.match(p.name))), reverse=True
    )
    for generation, path in gens:
        try:
            con, private = layers.connect(store, generation)
        except Exception:  # noqa: BLE001, S112 - an unreadable generation cannot be adopted: try the next older
            continue
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            chunk_ids = {r[0] for r in con.execute("SELECT chunk_id FROM chunks").fetchall()}
            chain = layers.chain_of(con, generation)
        except Exception:  # noqa: BLE001, S112 - an unreadable generation cannot be adopted: try the next older
            continue
        finally:
            con.close()
            for folder in private:
                shutil.rmtree(folder, ignore_errors=True)
        # Only a catalog its commit finished writing (older stores: not marked, accepted when
        # the vectors agree).
        marked = meta.get("committed_generation")
        if marked is not None and marked != str(generation) or not meta.get("model"):
            continue
        model, dim = meta["model"], int(meta["dim"])
        name = vectors.table_name(model, dim)
        try:
            table = vectors.connect(store).open_table(name)
            versions = sorted((v["version"] for v in table.list_versions()), reverse=True)
        except Exception:  # noqa: BLE001 - no readable versions: this generation cannot be adopted
            versions = []
        for version in versions:
            try:
                if _chunk_ids_at(store, name, version) == chunk_ids:
                    return Pointer(
                        generation=generation,
                        catalog=path.name,
                        vector_table=name,
                        vector_version=version,
                        model=model,
                        dim=dim,
                        committed_at=os.path.getmtime(path),
                        layers=chain,
                    )
            except Exception:  # noqa: BLE001, S112 - a version that does not read cannot be adopted: try the next
                continue
    return None


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
