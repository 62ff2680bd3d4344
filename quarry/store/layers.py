"""Catalog layers: a commit writes what changed, not a copy of the whole catalog.

Every generation still has one catalog file of its own, ``catalog-<gen>.duckdb``, and never changes
it once committed. Two kinds:

- a **base** holds the whole catalog in plain tables (``documents``, ``sections``, ``chunks``,
  ``runs``, ``meta``): a new store's first generation, a store written by an older quarry, and a
  merge of everything (:data:`REBASE_SHARE`, ``quarry maintain``);
- a **delta** holds, in the schema ``layer``, only the rows its generation wrote (documents added,
  changed, moved or touched, with their sections and chunks; its runs; the whole small ``meta``)
  and ``layer.owners``: for every document changed since the base, the layer holding its
  documents row and the layer holding its sections and chunks (NULL: deleted). Its ``main``
  schema has views ``documents``, ``sections``, ``chunks``, ``runs`` and ``meta`` that put the
  live rows of the base and every layer since together, so SQL reads a delta as it reads a base.

A delta names the earlier catalogs it builds on in ``meta.layers`` (generation numbers, base
first, itself last); its views refer to them by the alias DuckDB gives a file attached without
``AS``, its stem (``"catalog-000003"``). Opening a delta is: connect to it read-only, then
``ATTACH '<store>/catalog-000003.duckdb' (READ_ONLY)`` for each earlier layer (:func:`attach`,
``quarry status --json``'s ``catalog_attach``). Each layer is its own file, so DuckDB's lock per
file still lets readers hold committed layers read-only while a writer writes its new one.

The search index is segmented the same way, one segment per layer (quarry/retrieval/searchindex.py):
a layer's rows are its segment's rows. Layers merge at commit by :func:`plan_merge`: the newest
deltas fold into the commit's own layer while they are no bigger than what it holds (a binary
counter: a row is rewritten about log2 of the commits since the base times, and a generation has
about log2 of them layers), and everything becomes a new base once the deltas hold more than
:data:`REBASE_SHARE` of the base's rows. ``quarry maintain`` merges everything.

Fixed statements are in ``sql/layer_*.sql``, and those a whole catalog shares in ``sql/*.sql``
with ``{schema}`` tables (:func:`quarry.core.sqlfiles.load_sql`); the views, attaches and merges
are built here, because they name attached catalogs (identifiers, which a bound parameter cannot be) — only
generation numbers and names derived from them, never a value from a document.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from quarry.core import paths
from quarry.core.environment import environment
from quarry.core.sqlfiles import load_sql, statements
from quarry.store import catalog

__all__ = [
    "LAYER",
    "alias",
    "chain_of",
    "is_delta",
    "attach",
    "attach_sql",
    "connect",
    "open_over",
    "create_delta",
    "views",
    "chunk_texts",
    "chunk_rows_sql",
    "replace_documents",
    "delete_documents",
    "rewrite_documents",
    "moves_table",
    "touches_table",
    "set_meta",
    "set_any_meta",
    "insert_run",
    "plan_merge",
    "merge",
    "write_base",
    "missing_columns",
    "merge_min_rows",
    "rebase_share",
    "max_layers",
]

LAYER = "layer"
TABLES = ("documents", "sections", "chunks", "runs", "meta", "acl_roots")
_OWNER = {"documents": "doc_layer", "sections": "content_layer", "chunks": "content_layer"}
# Deltas smaller than this count as this big: the first ones merge on every commit, and a layer of
# a few thousand rows (a run that changed a hundred files) folds into the small commits after it
# rather than leaving them a segment of their own. 2,000 left three segments after fifty one-file
# commits at 100K chunks (search 1.61-1.71x a merged index's p50); 4,096 two (1.39-1.40x), for
# 0.16 s more a commit (bench/scale.py, docs/benchmarks.md).
MERGE_MIN_ROWS = 4_096
REBASE_SHARE = 0.25  # deltas holding more rows than this share of the base's: everything becomes a new base
MAX_LAYERS = 16  # a generation of more layers merges its newest ones anyway


def merge_min_rows() -> int:
    """``QUARRY_MERGE_MIN_ROWS`` (:data:`MERGE_MIN_ROWS`)."""
    return environment().merge_min_rows


def rebase_share() -> float:
    """``QUARRY_REBASE_SHARE`` (:data:`REBASE_SHARE`)."""
    return environment().rebase_share


def max_layers() -> int:
    """``QUARRY_MAX_LAYERS`` (:data:`MAX_LAYERS`), at least 2."""
    return environment().max_layers


def alias(generation: int) -> str:
    """The catalog alias of generation ``generation``'s file: its stem, as DuckDB names a file
    attached without ``AS``."""
    return f"catalog-{generation:06d}"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _cols(table: str) -> str:
    return ", ".join(_q(c) for c in catalog.table_schema(table).names)


# --- reading ---------------------------------------------------------------------------------


def is_delta(con, db: str | None = None) -> bool:
    """Whether the catalog ``db`` (default: the connection's current one) is a delta layer."""
    return bool(con.execute(load_sql("layer_kind"), [db]).fetchone()[0])


def chain_of(con, generation: int, db: str | None = None) -> tuple[int, ...]:
    """The layers of a catalog, base first and itself last: ``meta.layers`` of a delta, else
    ``(generation,)`` (a base)."""
    if not is_delta(con, db):
        return (generation,)
    table = f"{_q(db)}.{LAYER}.meta" if db else f"{LAYER}.meta"
    row = con.execute(f"SELECT value FROM {table} WHERE key = 'layers'").fetchone()
    return tuple(int(g) for g in json.loads(row[0])) if row else (generation,)


def attach(con, store: Path, generations: Sequence[int], read_only: bool = True) -> list[Path]:
    """Attach the catalogs of ``generations`` to ``con`` under their aliases (read-only). A file
    another process holds read-write (a SQL client opened it without ``-readonly``) is attached
    from a private copy: a committed layer never changes, so the copy is the same state. Returns
    the folders of such copies (the caller removes them after closing the connection).

    A layer already attached is left as it is: DuckDB shares one database instance between the
    connections of a process that open the same file, attachments included (two snapshots of one
    generation), and a committed layer is the same state whichever connection attached it."""

    private = []
    for gen in generations:
        path = store / f"{alias(gen)}.duckdb"
        if not path.is_file():
            raise FileNotFoundError(f"{path}, a layer of the catalog, is missing")
        mode = " (READ_ONLY)" if read_only else ""
        try:
            con.execute(f"ATTACH IF NOT EXISTS {_literal(path)} AS {_q(alias(gen))}{mode}")
        except duckdb.IOException as exc:
            if catalog.lock_holder(exc) is None:
                raise
            import logging
            import tempfile

            folder = Path(tempfile.mkdtemp(prefix="quarry-catalog-"))
            private.append(folder)
            shutil.copyfile(path, folder / path.name)
            con.execute(f"ATTACH IF NOT EXISTS {_literal(folder / path.name)} AS {_q(alias(gen))}{mode}")
            logging.getLogger("quarry").warning(
                "%s is held open read-write by %s; reading a private copy of it. Open catalogs read-only "
                "(duckdb -readonly FILE, or read_only=True) so that quarry and other readers can share them.",
                path,
                catalog.lock_holder(exc),
            )
    return private


def connect(store: Path, generation: int, chain: Sequence[int] | None = None):
    """A read-only connection to generation ``generation``'s catalog with the layers it reads
    attached, and the folders of private copies to remove after closing it (see :func:`attach`
    and :func:`quarry.store.catalog.connect_read_only`)."""

    con, private, _ = catalog.connect_read_only(store / f"{alias(generation)}.duckdb")
    folders = [private.parent] if private is not None else []
    try:
        chain = tuple(chain or chain_of(con, generation))
        folders += attach(con, store, chain[:-1])
    except BaseException:
        con.close()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return con, folders


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def attach_sql(store: Path, chain: Sequence[int]) -> list[str]:
    """The ``ATTACH`` statements that let a plain DuckDB connection to the last layer's file read
    it (empty for a base): what ``quarry status --json`` prints as ``catalog_attach``."""
    return [f"ATTACH {_literal(store / f'{alias(g)}.duckdb')} (READ_ONLY)" for g in list(chain)[:-1]]


def missing_columns(con, db: str) -> list[str]:
    """Columns of the current schema that the base catalog ``db`` lacks (an older quarry's): such a
    base cannot sit under views of today's columns."""
    have = {(t, c) for t, c in con.execute(load_sql("catalog_columns"), [db]).fetchall()}
    return [f"{t}.{c}" for t in TABLES for c in catalog.table_schema(t).names if (t, c) not in have]


# --- views -----------------------------------------------------------------------------------


def _branches(
    table: str,
    chain: Sequence[int],
    numbered: dict[int, int] | None = None,
    have: dict[int, frozenset[str]] | None = None,
) -> list[str]:
    """One SELECT per layer of ``chain`` (base first, the connection's own layer last) of the live
    rows of ``table``; with ``numbered`` (layer -> first row id), each row also gets its search
    index row id: its place in the layer's table by chunk_id, plus that offset. ``have`` (layer ->
    its table's columns): a column of today's schema that a layer written by an older quarry lacks
    is NULL in that layer's rows."""
    cols = _cols(table)
    base, own = chain[0], chain[-1]
    out = []
    for gen in chain:
        if have is not None:
            cols = ", ".join(_q(c) if c in have[gen] else f"NULL AS {_q(c)}" for c in catalog.table_schema(table).names)
        if len(chain) == 1:
            source, where = "main", ""
        elif gen == own:
            source, where = f"{LAYER}", ""
        else:
            source = f"{_q(alias(gen))}.{'main' if gen == base else LAYER}"
            col = _OWNER.get(table)
            if col is None:
                where = ""
            elif gen == base:
                where = f" WHERE doc_id NOT IN (SELECT doc_id FROM {LAYER}.owners WHERE {col} IS DISTINCT FROM {gen})"
            else:
                where = f" WHERE doc_id IN (SELECT doc_id FROM {LAYER}.owners WHERE {col} = {gen})"
        if numbered is None:
            out.append(f"SELECT {cols} FROM {source}.{table}{where}")
        else:
            number = f"(row_number() OVER (ORDER BY chunk_id) - 1 + {int(numbered[gen])})::BIGINT AS row_id"
            out.append(f"SELECT * FROM (SELECT {cols}, {number} FROM {source}.{table}){where}")
    return out


def views(chain: Sequence[int]) -> list[str]:
    """The statements that (re)create a delta's views over the layers of ``chain``."""
    out = []
    for table in ("documents", "sections", "chunks", "runs"):
        out.append(f"CREATE OR REPLACE VIEW main.{table} AS\n" + "\nUNION ALL ".join(_branches(table, chain)))
    out.append(f"CREATE OR REPLACE VIEW main.meta AS SELECT key, value FROM {LAYER}.meta")
    out.append(f"CREATE OR REPLACE VIEW main.acl_roots AS SELECT {_cols('acl_roots')} FROM {LAYER}.acl_roots")
    return out


def chunk_texts(con, generation: int, base: int, chunk_ids: Sequence[str]) -> dict[str, str]:
    """``{chunk_id: search_text}`` (the BM25 text) of these chunks in the earlier layer
    ``generation`` (attached to ``con``; ``base``: its chain's base) — the rows its search index
    segment holds, superseded ones included."""
    source = f"{_q(alias(generation))}.{'main' if generation == base else LAYER}"
    sql = f"SELECT chunk_id, search_text FROM {source}.chunks WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))"
    return dict(con.execute(sql, [list(chunk_ids)]).fetchall())


def chunk_rows_sql(chain: Sequence[int], offsets: dict[int, int], con=None) -> str:
    """A temporary view ``chunk_rows``: the live chunks with the row id the search index gives them
    (``sql/filter_rows.sql``). ``offsets``: each layer's first row id. With ``con`` (the reader's
    connection, the layers attached), columns a layer written by an older quarry lacks read NULL."""
    have = None
    if con is not None:
        have = {gen: _layer_columns(con, "chunks", chain, gen) for gen in chain}
    return "CREATE OR REPLACE TEMP VIEW chunk_rows AS\n" + "\nUNION ALL ".join(
        _branches("chunks", chain, offsets, have)
    )


def _layer_columns(con, table: str, chain: Sequence[int], gen: int) -> frozenset[str]:
    """The columns of ``table`` in layer ``gen`` of ``chain``, as :func:`_branches` reads it."""
    if len(chain) == 1:
        db, schema = con.execute("SELECT current_database()").fetchone()[0], "main"
    elif gen == chain[-1]:
        db, schema = con.execute("SELECT current_database()").fetchone()[0], LAYER
    else:
        db, schema = alias(gen), "main" if gen == chain[0] else LAYER
    rows = con.execute(load_sql("layer_columns"), [db, schema, table]).fetchall()
    return frozenset(r[0] for r in rows)


# --- writing a delta -----------------------------------------------------------------------


def open_over(store: Path, over: int, chain: Sequence[int] | None, generation: int, delta: bool = True):
    """A read-write connection to generation ``generation``'s new catalog over the committed
    generation ``over`` (whose layers are ``chain``; None: read from its catalog): a delta layer
    (its earlier layers attached read-only, ``USE``-d) when ``delta`` and the base's columns allow,
    else a whole catalog (a copy of a base, or the layers written out as one).

    Returns ``(con, chain of the new generation, private copy folders, is_delta)``. Raises
    ``duckdb.Error`` or ``FileNotFoundError`` for a committed catalog that cannot be read, and
    ``OSError`` / ``duckdb.IOException`` when the new file cannot be written."""
    path = store / f"{alias(generation)}.duckdb"
    source = store / f"{alias(over)}.duckdb"
    con = duckdb.connect()
    private: list[Path] = []
    try:
        private = attach(con, store, [over])  # a SQL client holding it read-write: a private copy
        chain = tuple(chain or chain_of(con, over, alias(over)))
        private += attach(con, store, chain[:-1])
        if delta and not missing_columns(con, alias(chain[0])):
            con.execute(f"ATTACH {_literal(path)} AS {_q(alias(generation))}")
            con.execute(f"USE {_q(alias(generation))}")
            new_chain = (*chain, generation)
            create_delta(con, new_chain)
            return con, new_chain, private, True
        if len(chain) > 1:
            write_base(con, alias(over), path)
        con.close()
        if len(chain) == 1:
            shutil.copyfile(source, path)
        for folder in private:
            shutil.rmtree(folder, ignore_errors=True)
        whole = catalog.connect(path, read_only=False)
        catalog.migrate(whole)
        return whole, (generation,), [], False
    except BaseException:
        try:
            con.close()
        except duckdb.Error:
            pass
        for folder in private:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def set_any_meta(con, key: str, value: str) -> None:
    """``meta[key] = value`` in the catalog ``con`` writes: a delta's own meta, or a whole catalog's."""
    if is_delta(con):
        set_meta(con, key, value)
    else:
        catalog.set_meta(con, key, value)


def create_delta(con, chain: Sequence[int]) -> None:
    """Make the connection's current catalog (attached read-write, ``USE``-d) the delta layer
    ``chain[-1]`` over the attached layers before it: its tables, its owners and meta carried
    from the layer before it, and its views. A temporary view ``previous_owners`` keeps the
    owners as the layer before it left them."""
    gen, prev = chain[-1], chain[-2]
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {LAYER}")
    con.execute(f"USE {_q(alias(gen))}.{LAYER}")
    try:
        for stmt in statements("schema"):
            if not stmt.lstrip().upper().startswith("ALTER"):
                con.execute(stmt)
    finally:
        con.execute(f"USE {_q(alias(gen))}.main")
    for stmt in statements("layer_schema"):
        con.execute(stmt)
    if is_delta(con, alias(prev)):
        con.execute(f"INSERT INTO {LAYER}.owners SELECT * FROM {_q(alias(prev))}.{LAYER}.owners")
        con.execute(f"CREATE OR REPLACE TEMP VIEW previous_owners AS SELECT * FROM {_q(alias(prev))}.{LAYER}.owners")
    else:
        con.execute(f"CREATE OR REPLACE TEMP VIEW previous_owners AS SELECT * FROM {LAYER}.owners WHERE FALSE")
    con.execute(f"INSERT INTO {LAYER}.meta SELECT key, value FROM {_q(alias(prev))}.main.meta")
    con.execute(f"INSERT INTO {LAYER}.acl_roots SELECT {_cols('acl_roots')} FROM {_q(alias(prev))}.main.acl_roots")
    set_chain(con, chain)


def set_chain(con, chain: Sequence[int]) -> None:
    """Record ``chain`` in the delta's meta and make its views read those layers."""
    set_meta(con, "layers", json.dumps(list(chain)))
    for stmt in views(chain):
        con.execute(stmt)


def set_meta(con, key: str, value: str) -> None:
    con.execute(load_sql("set_meta", LAYER), [key, value])


def insert_run(con, table: pa.Table) -> None:
    con.register("new_run", table)
    try:
        con.execute(load_sql("insert_run", LAYER))
    finally:
        con.unregister("new_run")


def set_owners(con, doc_ids: list[str], doc_layer: int | None, content_layer: int | None) -> None:
    if doc_ids:
        con.execute(load_sql("layer_set_owners"), [doc_ids, doc_layer, content_layer])


def replace_documents(con, records, run_id: str, generation: int, written: set[str]) -> None:
    """Write ``records`` into the layer (replacing rows this layer wrote for them before: a
    retried batch) and make the layer their owner, in one transaction."""
    if not records:
        return
    doc_ids = [r.doc_id for r in records]
    con.begin()
    try:
        again = [d for d in doc_ids if d in written]
        if again:
            for stmt in statements("delete_documents", LAYER):
                con.execute(stmt, [again])
        catalog.insert_records(con, records, run_id, LAYER)
        set_owners(con, doc_ids, generation, generation)
        con.commit()
    except BaseException:
        con.rollback()
        raise


def delete_documents(con, doc_ids: list[str]) -> None:
    """Delete documents: their rows in this layer go, and the owners hide those of earlier ones."""
    if not doc_ids:
        return
    con.begin()
    try:
        for stmt in statements("delete_documents", LAYER):
            con.execute(stmt, [doc_ids])
        set_owners(con, doc_ids, None, None)
        con.commit()
    except BaseException:
        con.rollback()
        raise


def rewrite_documents(con, name: str, table: pa.Table, generation: int, base: int) -> None:
    """Moves (``name`` = ``move``) or touches (``touch``) of a run, all at once: the documents rows
    with their new values go into the layer; chunks and sections stay where they are."""
    if not table.num_rows:
        return
    view = "moved_documents" if name == "move" else "touched_documents"
    con.begin()
    try:
        con.register(view, table)
        for stmt in statements(f"layer_{name}_documents"):
            code = "\n".join(line for line in stmt.splitlines() if not line.lstrip().startswith("--"))
            con.execute(code, [generation, base]) if "$1" in code else con.execute(code)
        con.commit()
    except BaseException:
        con.rollback()
        raise
    finally:
        try:
            con.unregister(view)
        except duckdb.Error:
            pass


def rewrite_principals(con, name: str, generation: int, base: int) -> list[str]:
    """New principals of documents (the registered Arrow table ``wanted_acl``, by path or doc_id as
    ``sql/<name>.sql`` says): their documents rows with the new principals go into the layer;
    chunks and sections stay where they are. Returns the doc_ids changed."""
    changed: list[str] = []
    con.begin()
    try:
        for stmt in statements(name):
            code = "\n".join(line for line in stmt.splitlines() if not line.lstrip().startswith("--"))
            cur = con.execute(code, [generation, base]) if "$1" in code else con.execute(code)
            if code.lstrip().upper().startswith("SELECT"):
                changed = [d for (d,) in cur.fetchall()]
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return changed


def moves_table(moves: list[tuple]) -> pa.Table:
    """``(doc_id, path, root, rel_path, mtime, run_id)`` per moved file as the Arrow table the
    move statements read (display forms and the exact bytes of names that are not UTF-8)."""
    return pa.Table.from_pylist(
        [
            {
                "doc_id": doc_id,
                "path": paths.display(path),
                "root": paths.display(root),
                "rel_path": paths.display(rel),
                "mtime": mtime,
                "run_id": run_id,
                "path_bytes": paths.raw_bytes(path),
            }
            for doc_id, path, root, rel, mtime, run_id in moves
        ],
        schema=pa.schema(
            [
                ("doc_id", pa.string()),
                ("path", pa.string()),
                ("root", pa.string()),
                ("rel_path", pa.string()),
                ("mtime", pa.timestamp("us")),
                ("run_id", pa.string()),
                ("path_bytes", pa.binary()),
            ]
        ),
    )


def touches_table(items: list[tuple]) -> pa.Table:
    """``(doc_id, mtime, run_id)`` of unchanged files whose rows a run refreshes (a new mtime, or a
    file the quick check had to read: its row then names this run)."""
    return pa.Table.from_pylist(
        [{"doc_id": d, "mtime": m, "run_id": r} for d, m, r in items],
        schema=pa.schema([("doc_id", pa.string()), ("mtime", pa.timestamp("us")), ("run_id", pa.string())]),
    )


# --- merging -----------------------------------------------------------------------------------


def plan_merge(
    base_rows: int, base_deleted: int, deltas: Sequence[tuple[int, int]], own_rows: int, force: bool = False
) -> list[int] | None:
    """Which earlier deltas to fold into the commit's own layer: a list of generations (the newest
    ones), or None to merge everything into a new base.

    ``deltas``: ``(generation, rows)`` of the earlier deltas, oldest first. A new base when forced,
    when the base is empty, or when the deltas and the rows deleted from the base pass
    :func:`rebase_share` of the base. Else the newest deltas fold in while each is no bigger than
    what the merge holds so far (sizes below :func:`merge_min_rows` count as that), and while the
    generation would have more than :func:`max_layers` layers."""
    changed = sum(rows for _, rows in deltas) + own_rows + base_deleted
    if force or base_rows <= 0 or changed > rebase_share() * base_rows:
        return None
    floor = merge_min_rows()
    merged: list[int] = []
    size = own_rows
    for gen, rows in reversed(list(deltas)):
        too_many = len(deltas) - len(merged) + 2 > max_layers()
        if too_many or max(rows, floor) <= max(size, floor):
            merged.append(gen)
            size += rows
        else:
            break
    return sorted(merged)


def merge(con, chain: Sequence[int], merged: Sequence[int]) -> tuple[int, ...]:
    """Fold the live rows of the ``merged`` layers (deltas of ``chain``) into the connection's own
    layer (``chain[-1]``); returns the new chain. Their runs come along; owners that named them name
    the own layer now."""
    if not merged:
        return tuple(chain)
    own = chain[-1]
    for gen in merged:
        source = f"{_q(alias(gen))}.{LAYER}"
        for table, col in _OWNER.items():
            con.execute(
                f"INSERT INTO {LAYER}.{table} SELECT {_cols(table)} FROM {source}.{table} "
                f"WHERE doc_id IN (SELECT doc_id FROM {LAYER}.owners WHERE {col} = ?)",
                [gen],
            )
        con.execute(f"INSERT INTO {LAYER}.runs SELECT {_cols('runs')} FROM {source}.runs")
    gens = list(merged)
    con.execute(f"UPDATE {LAYER}.owners SET doc_layer = ? WHERE list_contains(?::INTEGER[], doc_layer)", [own, gens])
    con.execute(
        f"UPDATE {LAYER}.owners SET content_layer = ? WHERE list_contains(?::INTEGER[], content_layer)", [own, gens]
    )
    new_chain = tuple(g for g in chain if g not in set(merged))
    set_chain(con, new_chain)
    return new_chain


def write_base(con, source_db: str, path: Path) -> None:
    """Write every live row the views of the catalog ``source_db`` show into a new base catalog at
    ``path`` (its own file: a merge of everything). The caller replaces its delta with it."""
    for suffix in ("", ".wal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    con.execute(f"ATTACH {_literal(path)} AS quarry_rebase")
    try:
        con.execute("USE quarry_rebase")
        for stmt in statements("schema"):
            con.execute(stmt)
        for table in TABLES:
            con.execute(
                f"INSERT INTO quarry_rebase.main.{table} SELECT {_cols(table)} FROM {_q(source_db)}.main.{table}"
            )
        con.execute("DELETE FROM quarry_rebase.main.meta WHERE key = 'layers'")
        con.execute("CHECKPOINT quarry_rebase")
    finally:
        con.execute(f"USE {_q(source_db)}")
        con.execute("DETACH quarry_rebase")
