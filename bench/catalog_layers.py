"""What a commit's catalog costs: the whole copy quarry made before, a delta layer, one database.

A synthetic catalog of ``--chunks`` chunks (20 a document, ~700 characters of text, tokens and a
header each: the shape of bench/scale.py's tree) is written once as a whole catalog (a base).
Then, for one edited document (its 20 chunks replaced):

- ``copy``: what every commit did before catalog layers — copy the committed file, open it,
  replace the document, checkpoint (wall time, bytes written: the whole file);
- ``delta``: what a commit does now — a new file with the earlier one attached read-only
  (``quarry.store.layers.open_over``), the document written into it, checkpoint;
- ``one database``: the alternative of one DuckDB file for every generation (a generation column
  and snapshot views): the write is as small, but DuckDB locks a file per process, so a reader
  process cannot open it while the writer holds it read-write — measured here as the error a
  second process gets.

Then what readers pay for views over layers: opening the catalog (connect and attach) and three
queries (``count(*)`` of chunks, ``sql/status.sql``, ``sql/filter_rows.sql`` with a path filter), on
the base, on a delta over it, and on a generation of eight stacked deltas.

    python bench/catalog_layers.py [--chunks 100000] [--json]

Prints a table (stderr with --json) and writes bench/results/catalog_layers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, log


def make_base(store: Path, chunks: int) -> Path:
    """A whole catalog (generation 1) of ``chunks`` synthetic chunks, written by SQL."""
    from quarry.store import catalog

    path = store / "catalog-000001.duckdb"
    con = catalog.create(path)
    docs = max(1, chunks // 20)
    con.execute(
        """
        INSERT INTO documents
        SELECT printf('%020x', d), '/tree/part' || (d // 1000) || '/doc' || d || '.md', '/tree',
               'part' || (d // 1000) || '/doc' || d || '.md', 'md', 14000, TIMESTAMP '2024-01-01', md5(d::VARCHAR),
               'Document ' || d, '', NULL, 20, 20, '{}', TIMESTAMP '2024-01-01', 'r1', NULL
        FROM range(?) t(d)""",
        [docs],
    )
    con.execute(
        """
        INSERT INTO sections
        SELECT printf('%020x', d), s, 'Section ' || s, 2, s * 700, s * 700 + 700, NULL, NULL, NULL
        FROM range(?) t(d), range(20) u(s)""",
        [docs],
    )
    con.execute(
        """
        INSERT INTO chunks
        SELECT printf('%020x', d) || ':' || s, printf('%020x', d), s, s, s * 700, s * 700 + 700, NULL, NULL,
               'Document: Document ' || d || ' > Section ' || s,
               repeat('lorem ipsum dolor sit amet ' || (d * 20 + s) || ' ', 25), md5((d * 20 + s)::VARCHAR), 180,
               repeat('lorem ipsum dolor sit amet ' || (d * 20 + s) || ' ', 25)
        FROM range(?) t(d), range(20) u(s)""",
        [docs],
    )
    con.execute("CHECKPOINT")
    con.close()
    return path


def edited_record(doc: int):
    """Document ``doc`` with new text in all of its 20 chunks."""
    import hashlib

    from quarry.core.models import Chunk, DocumentRecord, FileInfo, Section

    doc_id = f"{doc:020x}"
    rel = f"part{doc // 1000}/doc{doc}.md"
    file = FileInfo(
        path=f"/tree/{rel}",
        root="/tree",
        rel_path=rel,
        file_type="md",
        size=14001,
        mtime=1.7e9,
        sha256=hashlib.sha256(b"edited").hexdigest(),
    )
    chunks = [
        Chunk(
            f"{doc_id}:{s}",
            doc_id,
            s,
            s,
            s * 700,
            s * 700 + 700,
            None,
            None,
            "Document: edited",
            "edited paragraph " * 40,
            hashlib.sha256(f"e{s}".encode()).hexdigest(),
            180,
        )
        for s in range(20)
    ]
    sections = [Section(s, f"Section {s}", 2, s * 700, s * 700 + 700) for s in range(20)]
    return DocumentRecord(doc_id, file, "Document (edited)", "", sections, chunks)


def commit_copy(store: Path, source: Path, generation: int) -> tuple[float, int]:
    from quarry.store import catalog

    t = time.perf_counter()
    path = store / f"catalog-{generation:06d}.duckdb"
    shutil.copyfile(source, path)
    con = catalog.connect(path, read_only=False)
    catalog.replace_documents(con, [edited_record(7)], "r2")
    con.execute("CHECKPOINT")
    con.close()
    return time.perf_counter() - t, path.stat().st_size


def commit_delta(store: Path, over: int, generation: int, doc: int) -> tuple[float, int]:
    from quarry.store import layers

    t = time.perf_counter()
    con, chain, private, delta = layers.open_over(store, over, None, generation)
    assert delta and not private
    layers.replace_documents(con, [edited_record(doc)], f"r{generation}", generation, set())
    con.execute("CHECKPOINT")
    con.close()
    path = store / f"catalog-{generation:06d}.duckdb"
    return time.perf_counter() - t, path.stat().st_size


def one_database_lock(path: Path) -> str:
    """What a reader process gets while a writer holds ``path`` read-write."""
    import duckdb

    writer = duckdb.connect(str(path))
    try:
        code = f"import duckdb; duckdb.connect({str(path)!r}, read_only=True); print('opened')"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        return (done.stdout.strip() or done.stderr.strip().splitlines()[-1])[:160]
    finally:
        writer.close()


def reader_costs(store: Path, generation: int, repeat: int = 5) -> dict:
    from quarry.core.sqlfiles import load_sql
    from quarry.store import layers

    opens, queries = [], {"count": [], "status": [], "filter": []}
    for _ in range(repeat):
        t = time.perf_counter()
        con, private = layers.connect(store, generation)
        opens.append(time.perf_counter() - t)
        chain = layers.chain_of(con, generation)
        offsets, start = {}, 0
        for g in chain:  # each layer's rows, as the index numbers them
            offsets[g] = start
            table = "main.chunks" if g == chain[0] else "layer.chunks"
            start += con.execute(f'SELECT count(*) FROM "catalog-{g:06d}".{table}').fetchone()[0]
        con.execute(
            layers.chunk_rows_sql(
                chain if len(chain) > 1 else (generation,), offsets if len(chain) > 1 else {generation: 0}
            )
        )
        for name, sql, params in (
            ("count", "SELECT count(*) FROM chunks", None),
            ("status", load_sql("status"), None),
            ("filter", load_sql("filter_rows").replace("TRUE /* filter */", "d.path LIKE ?"), ["%/part3/%"]),
        ):
            t = time.perf_counter()
            con.execute(sql, params).fetchall() if params else con.execute(sql).fetchall()
            queries[name].append(time.perf_counter() - t)
        con.close()
    return {
        "open_ms": round(statistics.median(opens) * 1000, 1),
        **{f"{k}_ms": round(statistics.median(v) * 1000, 1) for k, v in queries.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    store = RESULTS / "catalog_layers" / f"store-{args.chunks}"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    t = time.perf_counter()
    base = make_base(store, args.chunks)
    log(
        f"base catalog of {args.chunks} chunks: {base.stat().st_size / 2**20:.0f} MB in {time.perf_counter() - t:.0f} s"
    )
    rows = []
    seconds, size = commit_copy(store, base, 90)
    rows.append({"layout": "copy (before)", "commit_s": round(seconds, 2), "bytes_written": size})
    (store / "catalog-000090.duckdb").unlink()
    seconds, size = commit_delta(store, 1, 2, 7)
    rows.append({"layout": "delta layer (now)", "commit_s": round(seconds, 2), "bytes_written": size})
    rows.append({"layout": "one database", "reader_while_writing": one_database_lock(base)})
    reads = {"base": reader_costs(store, 1), "1 delta": reader_costs(store, 2)}
    for gen in range(3, 10):  # eight stacked deltas
        commit_delta(store, gen - 1, gen, gen * 11)
    reads["8 deltas"] = reader_costs(store, 9)
    out = {
        "chunks": args.chunks,
        "base_bytes": base.stat().st_size,
        "commits": rows,
        "readers": reads,
        "load_avg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    path = RESULTS / "catalog_layers.json"
    old = json.loads(path.read_text())["results"] if path.exists() else []
    results = [r for r in old if r["chunks"] != args.chunks] + [out]
    path.write_text(json.dumps({"results": results}, indent=2))
    lines = [
        f"{args.chunks} chunks, base catalog {out['base_bytes'] / 2**20:.0f} MB (load {out['load_avg']})",
        f"{'commit of one edited document':<32} {'wall s':>7} {'MB written':>10}",
    ]
    for r in rows:
        if "commit_s" in r:
            lines.append(f"{r['layout']:<32} {r['commit_s']:>7} {r['bytes_written'] / 2**20:>10.2f}")
        else:
            lines.append(
                f"{r['layout']:<32} a reader process while the writer holds the file: {r['reader_while_writing']}"
            )
    lines.append(f"{'reader':<12} {'open ms':>8} {'count ms':>9} {'status ms':>10} {'filter ms':>10}")
    for name, r in reads.items():
        lines.append(f"{name:<12} {r['open_ms']:>8} {r['count_ms']:>9} {r['status_ms']:>10} {r['filter_ms']:>10}")
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))
    shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
