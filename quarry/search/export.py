"""``quarry export``: the catalog (and optionally the vectors) as Parquet or JSON Lines files.

``Index.export(out, fmt)`` writes ``documents``, ``sections`` and ``chunks`` as
``OUT/<table>.parquet`` (or ``.jsonl``) plus ``OUT/manifest.json``. Everything comes from one
committed snapshot (the catalog generation and LanceDB version that ``CURRENT`` named when the
export began), so a concurrent index run never mixes two states into one export.

Memory stays bounded by a batch: rows are streamed from DuckDB with ``fetch_record_batch``
(always drained to the end) into a ``pyarrow.parquet.ParquetWriter`` or a JSONL file. With
``vectors=True`` the chunks are driven by the LanceDB table instead: each batch of
``(chunk_id, vector)`` is joined to its catalog rows, so neither side is ever held whole.
Columns are documented in docs/export.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from quarry.core.errors import QuarryError, UsageError
from quarry.core.sqlfiles import load_sql
from quarry.retrieval.corpus import pii
from quarry.search.filters import with_filter
from quarry.search.windows import id_lines

FORMATS = ("parquet", "jsonl")
# free text a person wrote, and names that can hold a mail address (a message's path): masked by --redact
REDACTED_COLUMNS = ("title", "summary", "section", "header", "text", "path", "rel_path")
REDACTED_JSON = ("metadata",)  # JSON text whose string values --redact masks (document properties, mail headers)
DUP_COLUMNS = ("dup_of", "dup_cluster")  # doc ids of other documents: blanked where the caller may not read them
TABLES = ("documents", "sections", "chunks")
BATCH_ROWS = 8192


@dataclass
class ExportReport:
    """What an export wrote: rows per table and the files, from which snapshot."""

    out: str
    format: str
    generation: int
    model: str
    dim: int
    vectors: bool
    filter: str
    rows: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    redacted: list[str] = field(default_factory=list)  # PII kinds masked in the text columns

    def to_dict(self) -> dict:
        return asdict(self)


def _batches(con, sql: str, params: list, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Record batches of a query, read to the end even if the consumer stops early."""
    reader = con.execute(sql, params).fetch_record_batch(batch_rows)
    try:
        yield from reader
    finally:
        for _ in reader:  # drain: a half-read DuckDB result stream can block the connection
            pass


class _Sink:
    """One output file; Parquet through ParquetWriter, JSONL line by line. Written to a temporary
    name and renamed into place on close, so a failed export leaves no half file behind."""

    def __init__(self, path: Path, fmt: str, schema: pa.Schema):
        self.path = path
        self.tmp = path.with_name(path.name + ".part")
        self.fmt = fmt
        self.schema = schema
        self.rows = 0
        if fmt == "parquet":
            self._writer = pq.ParquetWriter(str(self.tmp), schema, compression="zstd")
        else:
            self._fh = self.tmp.open("w", encoding="utf-8")

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.fmt == "parquet":
            self._writer.write_batch(batch)
        else:
            for row in batch.to_pylist():
                self._fh.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
        self.rows += batch.num_rows

    def close(self) -> None:
        if self.fmt == "parquet":
            self._writer.close()
        else:
            self._fh.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        try:
            self.close()
        finally:
            self.path.unlink(missing_ok=True)


def _json_default(value):
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# Signal columns as NULLs of their types, for a catalog committed before they existed (the next
# run's copy of it gains them: sql/schema.sql).
_SIGNALS = {
    "documents": (
        "content_hash, dup_cluster, dup_of, dup_similarity, lang, pii_total",
        "NULL::VARCHAR AS content_hash, NULL::VARCHAR AS dup_cluster, NULL::VARCHAR AS dup_of, "
        "NULL::DOUBLE AS dup_similarity, NULL::VARCHAR AS lang, NULL::INTEGER AS pii_total",
    ),
    "chunks": (
        """d.dup_of, c.norm_hash, c.lang,
       c.pii_email, c.pii_phone, c.pii_card, c.pii_iban, c.pii_national_id, c.pii_secret, c.pii_total,
       c.q_words, c.q_mean_word, c.q_alpha, c.q_dup_lines, c.q_top_2gram, c.q_dup_5gram""",
        "NULL::VARCHAR AS dup_of, NULL::VARCHAR AS norm_hash, NULL::VARCHAR AS lang, "
        + ", ".join(
            f"NULL::INTEGER AS pii_{k}" for k in ("email", "phone", "card", "iban", "national_id", "secret", "total")
        )
        + ", NULL::INTEGER AS q_words, "
        + ", ".join(
            f"NULL::DOUBLE AS {q}" for q in ("q_mean_word", "q_alpha", "q_dup_lines", "q_top_2gram", "q_dup_5gram")
        ),
    ),
}
_BOILERPLATE = ("c.boilerplate\n", "NULL::DOUBLE AS boilerplate\n")  # a catalog from before that column


def export_sql(snap, table: str) -> str:
    """``sql/export_<table>.sql``, its signal columns NULL for a catalog from before them."""
    sql = load_sql(f"export_{table}")
    if table in _SIGNALS and not snap.has_signals:
        columns, nulls = _SIGNALS[table]
        if columns not in sql:
            raise AssertionError(f"export_{table}.sql no longer lists the signal columns as export.py expects")
        sql = sql.replace(columns, nulls)
    if table == "chunks" and not snap.has_boilerplate:
        sql = sql.replace(*_BOILERPLATE)
    return sql


def _redact_json(text: str, kinds: tuple[str, ...]) -> str:
    """The JSON ``text`` with every string value's ``kinds`` masked (keys kept); text that is not
    JSON is masked as a whole."""

    def walk(value):
        if isinstance(value, str):
            return pii.redact(value, kinds)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    try:
        parsed = json.loads(text)
    except ValueError:
        return pii.redact(text, kinds)
    return json.dumps(walk(parsed), ensure_ascii=False)


def _masked(batch: pa.RecordBatch, kinds: tuple[str, ...], hidden: frozenset[str] = frozenset()) -> pa.RecordBatch:
    """``batch`` with the personal data and secrets of ``kinds`` masked in its free-text columns
    (:data:`REDACTED_COLUMNS`) and in the string values of its JSON columns (:data:`REDACTED_JSON`),
    and each :data:`DUP_COLUMNS` value naming a document of ``hidden`` (doc ids the caller may not
    read) set to NULL (``dup_similarity`` with ``dup_of``)."""
    names = batch.schema.names
    if not kinds and not hidden:
        return batch
    gone = None  # rows whose dup_of was blanked
    if hidden and "dup_of" in names:
        gone = [v in hidden for v in batch.column(names.index("dup_of")).to_pylist()]
    columns = []
    for name, column in zip(names, batch.columns):
        if kinds and name in REDACTED_COLUMNS:
            column = pa.array([None if v is None else pii.redact(v, kinds) for v in column.to_pylist()], column.type)
        elif kinds and name in REDACTED_JSON:
            column = pa.array([None if v is None else _redact_json(v, kinds) for v in column.to_pylist()], column.type)
        elif hidden and name in DUP_COLUMNS:
            column = pa.array([None if v in hidden else v for v in column.to_pylist()], column.type)
        elif gone is not None and name == "dup_similarity":
            column = pa.array([None if g else v for v, g in zip(column.to_pylist(), gone)], column.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _unreadable(snap, filters) -> frozenset[str]:
    """With a permission clause in ``filters``: the documents named by a ``dup_of``/``dup_cluster``
    that the caller may not read (sql/export_unreadable.sql; as many as such clusters at most).
    Read before a table's rows stream, as one result at a time is all a connection holds."""
    if not filters or not filters.restricted or not snap.has_signals:
        return frozenset()
    sql, params = with_filter(load_sql("export_unreadable"), filters.permissions())
    return frozenset(row[0] for row in snap.con.execute(sql, params).fetchall())


def _copy_query(
    con,
    sql: str,
    params: list,
    path: Path,
    fmt: str,
    batch_rows: int,
    redact: tuple[str, ...] = (),
    hidden: frozenset[str] = frozenset(),
) -> int:
    reader = con.execute(sql, params).fetch_record_batch(batch_rows)
    sink = _Sink(path, fmt, reader.schema)
    try:
        for batch in reader:
            sink.write(_masked(batch, redact, hidden))
    except BaseException:
        for _ in reader:
            pass
        sink.abort()
        raise
    sink.close()
    return sink.rows


def _copy_chunks_with_vectors(
    snap, filters, path: Path, fmt: str, batch_rows: int, redact: tuple[str, ...] = ()
) -> int:
    """Chunks joined to their vectors, one LanceDB batch at a time."""
    con, table = snap.con, snap.table
    if table is None:
        raise QuarryError(f"the store at {snap.store} has no vector table to export vectors from")
    sql, fparams = with_filter(export_sql(snap, "chunks"), filters)
    hidden = _unreadable(snap, filters)
    vec_type = pa.list_(pa.float32(), snap.pointer.dim)
    empty = con.execute(sql, ["", "", *fparams]).fetch_arrow_table()  # no rows: just the schema
    schema = empty.schema.append(pa.field("vector", vec_type))
    sink = _Sink(path, fmt, schema)
    try:
        for lb in table.search().select(["chunk_id", "vector"]).limit(None).to_batches(batch_size=batch_rows):
            ids = lb.column("chunk_id").to_pylist()
            where = {cid: i for i, cid in enumerate(ids)}
            vectors = lb.column("vector")
            lines = id_lines(ids)
            for batch in _batches(con, sql, [lines, lines, *fparams], batch_rows):
                take = pa.array([where[c] for c in batch.column("chunk_id").to_pylist()], pa.int64())
                sink.write(
                    pa.RecordBatch.from_arrays(
                        [*_masked(batch, redact, hidden).columns, vectors.take(take).cast(vec_type)], schema=schema
                    )
                )
        csql, cparams = with_filter(load_sql("export_count"), filters)
        total = con.execute(csql, cparams).fetchone()[0]
        if total != sink.rows:
            # The commit protocol gives every catalog chunk a vector row; a gap means a damaged store.
            raise QuarryError(
                f"the vector table {snap.pointer.vector_table} lacks {total - sink.rows} of the "
                f"{total} chunks to export: export without --vectors, or re-index with --full"
            )
    except BaseException:
        sink.abort()
        raise
    sink.close()
    return sink.rows


def export(
    index,
    out: str | os.PathLike,
    fmt: str = "parquet",
    *,
    vectors: bool = False,
    filters=None,
    batch_rows: int = BATCH_ROWS,
    overwrite: bool = False,
    redact=(),
) -> ExportReport:
    """``index.export(out, fmt, ...)``: see :meth:`quarry.search.query.Index.export` and :func:`export_snapshot`."""
    return index.export(
        out, fmt, vectors=vectors, filters=filters, batch_rows=batch_rows, overwrite=overwrite, redact=redact
    )


def export_snapshot(
    snap,
    out: str | os.PathLike,
    fmt: str = "parquet",
    *,
    vectors: bool = False,
    filters=None,
    batch_rows: int = BATCH_ROWS,
    overwrite: bool = False,
    redact=(),
) -> ExportReport:
    """Write one committed snapshot (:class:`quarry.store.reader.Snapshot`) to the folder ``out`` as ``fmt`` files.

    ``filters`` (a :class:`quarry.search.filters.Filter`) keeps the chunks it matches, and the
    documents and sections that hold one of them; without it everything is written, documents
    without chunks included. ``vectors=True`` adds each chunk's embedding as ``vector``.
    A folder that already holds files is refused unless ``overwrite`` (then quarry's own files
    in it are replaced and nothing else is touched); a folder inside the store is always refused.

    ``out`` naming a file ``*.parquet`` / ``*.jsonl`` (of ``fmt``) writes the chunks alone to it, a
    corpus in one file. ``redact``: PII kinds (quarry/retrieval/corpus/pii.py; ``"all"``, or a comma
    list) masked as ``[KIND]`` in the free-text columns (:data:`REDACTED_COLUMNS`) and the string
    values of ``metadata``. With a permission clause in ``filters``, ``dup_of``/``dup_cluster``
    naming a document the caller may not read are NULL.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    try:
        kinds = pii.parse_kinds(redact) if isinstance(redact, str) else tuple(redact or ())
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if any(k not in pii.KINDS for k in kinds):
        raise UsageError(f"unknown PII kind in redact {kinds}; choose of {', '.join(pii.KINDS)}")
    if batch_rows < 1:
        raise UsageError("batch_rows must be at least 1")
    dest = Path(out).expanduser().absolute()
    if dest.suffix in (".parquet", ".jsonl") and not dest.is_dir():
        return _export_corpus_file(
            snap, dest, fmt, vectors=vectors, filters=filters, batch_rows=batch_rows, overwrite=overwrite, kinds=kinds
        )
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"export target {dest} exists and is not a folder")
    store = Path(snap.store).resolve()
    real = dest.resolve()
    if real == store or store in real.parents:
        raise UsageError(f"export target {dest} is inside the store {store}: choose a folder outside it")
    if dest.is_dir() and not overwrite and any(dest.iterdir()):
        raise UsageError(
            f"export target {dest} is not empty: choose an empty folder, or pass --overwrite to "
            "replace the export files in it"
        )
    dest.mkdir(parents=True, exist_ok=True)
    con = snap.con  # one snapshot for the whole export, whatever commits meanwhile
    report = ExportReport(
        out=str(dest),
        format=fmt,
        generation=snap.pointer.generation,
        model=snap.pointer.model,
        dim=snap.pointer.dim,
        vectors=vectors,
        filter=str(filters) if filters else "",
        redacted=list(kinds),
    )
    everything = not filters
    hidden = _unreadable(snap, filters)
    for name in TABLES:
        path = dest / f"{name}.{fmt}"
        if name == "chunks" and vectors:
            rows = _copy_chunks_with_vectors(snap, filters, path, fmt, batch_rows, kinds)
        else:
            sql, params = with_filter(export_sql(snap, name), filters)
            if name == "documents" and not snap.has_principals:  # a catalog from before principals
                sql = sql.replace(", principals\nFROM documents", ", ['public'] AS principals\nFROM documents")
            lead = [None, None] if name == "chunks" else [everything]
            try:
                rows = _copy_query(con, sql, [*lead, *params], path, fmt, batch_rows, kinds, hidden)
            except duckdb.Error as exc:
                if filters:  # e.g. a value that cannot be compared with its column
                    raise UsageError(f"filter {filters}: {exc}") from exc
                raise
        report.rows[name] = rows
        report.files[name] = str(path)
    manifest = dest / "manifest.json"
    tmp = manifest.with_name("manifest.json.part")
    tmp.write_text(
        json.dumps({**report.to_dict(), "exported_at": dt.datetime.now(dt.UTC).isoformat()}, indent=2), encoding="utf-8"
    )
    os.replace(tmp, manifest)
    return report


def _export_corpus_file(
    snap, dest: Path, fmt: str, *, vectors: bool, filters, batch_rows: int, overwrite: bool, kinds: tuple[str, ...]
) -> ExportReport:
    """The chunks alone, into the one file ``dest`` (its suffix must be ``fmt``'s)."""
    if dest.suffix != f".{fmt}":
        raise UsageError(
            f"export target {dest} ends in {dest.suffix} but the format is {fmt}: "
            f"use --format {dest.suffix[1:]} or another name"
        )
    store = Path(snap.store).resolve()
    if store in dest.resolve().parents:
        raise UsageError(f"export target {dest} is inside the store {store}: choose a file outside it")
    if dest.exists() and not overwrite:
        raise UsageError(f"export target {dest} exists: pass --overwrite to replace it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    report = ExportReport(
        out=str(dest),
        format=fmt,
        generation=snap.pointer.generation,
        model=snap.pointer.model,
        dim=snap.pointer.dim,
        vectors=vectors,
        filter=str(filters) if filters else "",
        redacted=list(kinds),
    )
    if vectors:
        rows = _copy_chunks_with_vectors(snap, filters, dest, fmt, batch_rows, kinds)
    else:
        sql, params = with_filter(export_sql(snap, "chunks"), filters)
        try:
            rows = _copy_query(
                snap.con, sql, [None, None, *params], dest, fmt, batch_rows, kinds, _unreadable(snap, filters)
            )
        except duckdb.Error as exc:
            if filters:
                raise UsageError(f"filter {filters}: {exc}") from exc
            raise
    report.rows["chunks"] = rows
    report.files["chunks"] = str(dest)
    return report
