"""``quarry export``: Parquet and JSONL from a real store, streamed, filtered, with vectors."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLE

import quarry
from quarry.cli.main import cli as cli_group
from quarry.core.errors import UsageError
from quarry.search.export import export
from quarry.search.filters import Filter

TABLES = ("documents", "sections", "chunks")


@pytest.fixture(scope="module")
def store(tmp_path_factory, prefect_api):
    from quarry.flows.index import index_flow

    db = tmp_path_factory.mktemp("export") / "db"
    index_flow([str(SAMPLE)], db=str(db))
    return db


def catalog_counts(db) -> dict[str, int]:
    with quarry.open(db) as idx:
        con = idx.snapshot.con
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_parquet_export_holds_every_row(store, tmp_path):
    with quarry.open(store) as idx:
        report = export(idx, tmp_path / "out", "parquet")
        chunks = dict(idx.snapshot.con.execute("SELECT chunk_id, text FROM chunks").fetchall())
        generation = idx.snapshot.pointer.generation
    assert report.rows == catalog_counts(store) and report.generation == generation
    for t in TABLES:
        assert pq.read_metadata(tmp_path / "out" / f"{t}.parquet").num_rows == report.rows[t]
    table = pq.read_table(tmp_path / "out" / "chunks.parquet").to_pylist()
    assert {r["chunk_id"]: r["text"] for r in table} == chunks
    row = table[0]
    assert row["header"] and row["path"].startswith(str(SAMPLE)) and row["end_char"] > row["start_char"]
    assert json.loads(row["metadata"]) is not None and "vector" not in row
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["generation"] == generation and manifest["rows"] == report.rows
    assert not list((tmp_path / "out").glob("*.part"))


def test_jsonl_export_matches_parquet(store, tmp_path):
    with quarry.open(store) as idx:
        export(idx, tmp_path / "p", "parquet")
        export(idx, tmp_path / "j", "jsonl")
    for t in TABLES:
        rows = read_jsonl(tmp_path / "j" / f"{t}.jsonl")
        parquet = pq.read_table(tmp_path / "p" / f"{t}.parquet")
        assert len(rows) == parquet.num_rows and set(rows[0]) == set(parquet.schema.names)
    doc = read_jsonl(tmp_path / "j" / "documents.jsonl")[0]
    assert re.match(r"\d{4}-\d{2}-\d{2}T", doc["mtime"])  # timestamps as ISO text


def test_vectors_are_joined_from_the_snapshot_table(store, tmp_path):
    with quarry.open(store) as idx:
        report = export(idx, tmp_path / "v", "parquet", vectors=True, batch_rows=4)
        lance = idx.snapshot.table.search().select(["chunk_id", "vector"]).limit(None).to_arrow()
        dim = idx.snapshot.pointer.dim
    table = pq.read_table(tmp_path / "v" / "chunks.parquet")
    assert table.num_rows == report.rows["chunks"] == catalog_counts(store)["chunks"]
    assert table.schema.field("vector").type.list_size == dim
    want = dict(zip(lance.column("chunk_id").to_pylist(), lance.column("vector").to_pylist()))
    for cid, vec in zip(table.column("chunk_id").to_pylist(), table.column("vector").to_pylist()):
        np.testing.assert_array_equal(np.asarray(vec, np.float32), np.asarray(want[cid], np.float32))
    rows = read_jsonl(_jsonl_with_vectors(store, tmp_path))
    assert len(rows[0]["vector"]) == dim


def _jsonl_with_vectors(store, tmp_path):
    with quarry.open(store) as idx:
        export(idx, tmp_path / "vj", "jsonl", vectors=True)
    return tmp_path / "vj" / "chunks.jsonl"


def test_small_batches_stream_into_many_row_groups(store, tmp_path):
    with quarry.open(store) as idx:
        small = export(idx, tmp_path / "small", "parquet", batch_rows=3)
        big = export(idx, tmp_path / "big", "parquet")
    assert small.rows == big.rows
    assert pq.ParquetFile(tmp_path / "small" / "chunks.parquet").num_row_groups > 1
    assert pq.read_table(tmp_path / "small" / "chunks.parquet").equals(
        pq.read_table(tmp_path / "big" / "chunks.parquet")
    )


@pytest.mark.parametrize("vectors", [False, True])
def test_filters_keep_matching_chunks_and_their_documents_and_sections(store, tmp_path, vectors):
    flt = Filter.build(path=["runbooks"])
    with quarry.open(store) as idx:
        con = idx.snapshot.con
        want_docs = {
            r[0] for r in con.execute("SELECT doc_id FROM documents WHERE path LIKE '%/runbooks/%'").fetchall()
        }
        report = export(idx, tmp_path / "f", "jsonl", filters=flt, vectors=vectors)
    docs = read_jsonl(tmp_path / "f" / "documents.jsonl")
    chunks = read_jsonl(tmp_path / "f" / "chunks.jsonl")
    sections = read_jsonl(tmp_path / "f" / "sections.jsonl")
    assert want_docs and {d["doc_id"] for d in docs} == want_docs
    assert chunks and all("/runbooks/" in c["path"] for c in chunks)
    assert {(s["doc_id"], s["section_index"]) for s in sections} == {(c["doc_id"], c["section_index"]) for c in chunks}
    assert report.filter and 0 < report.rows["chunks"] < catalog_counts(store)["chunks"]


def test_a_filter_matching_nothing_writes_empty_files(store, tmp_path):
    with quarry.open(store) as idx:
        report = export(idx, tmp_path / "e", "parquet", filters=Filter.build(file_type=["pdf"]))
    assert report.rows == {"documents": 0, "sections": 0, "chunks": 0}
    assert pq.read_table(tmp_path / "e" / "chunks.parquet").num_rows == 0
    assert "text" in pq.read_schema(tmp_path / "e" / "chunks.parquet").names


def test_bad_arguments(store, tmp_path):
    (tmp_path / "file").write_text("x")
    with quarry.open(store) as idx:
        with pytest.raises(UsageError, match="unknown export format"):
            export(idx, tmp_path / "x", "csv")
        with pytest.raises(UsageError, match="not a folder"):
            export(idx, tmp_path / "file", "parquet")


def test_docs_list_every_exported_column(store, tmp_path):
    doc = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    with quarry.open(store) as idx:
        export(idx, tmp_path / "d", "parquet", vectors=True)
    for t in TABLES:
        section = doc.split(f"### {t}", 1)[1].split("\n### ", 1)[0]
        for name in pq.read_schema(tmp_path / "d" / f"{t}.parquet").names:
            assert f"| `{name}` |" in section, f"docs/export.md does not describe {t}.{name}"
    for key in json.loads((tmp_path / "d" / "manifest.json").read_text()):
        assert f"`{key}`" in doc, f"docs/export.md does not describe manifest key {key}"


def test_cli_export(store, tmp_path):
    runner = CliRunner()
    done = runner.invoke(
        cli_group, ["export", "--format", "parquet", str(tmp_path / "c"), "--db", str(store), "--json"]
    )
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["rows"] == catalog_counts(store)
    done = runner.invoke(cli_group, ["export", str(tmp_path / "t"), "--db", str(store), "--type", "md", "--vectors"])
    assert done.exit_code == 0 and "with vectors" in done.stdout and "filter: file_type" in done.stdout
    done = runner.invoke(cli_group, ["export", str(tmp_path / "z"), "--db", str(store), "--since", "not-a-date"])
    assert done.exit_code == 2 and "since" in done.stderr
    done = runner.invoke(cli_group, ["export", "--format", "csv", str(tmp_path / "z"), "--db", str(store)])
    assert done.exit_code == 2


def test_redact_masks_metadata_and_dup_ids_name_no_unreadable_document(tmp_path, run_flow):
    import os
    import time

    tree, db = tmp_path / "tree", tmp_path / "db"
    (tree / "hr").mkdir(parents=True)
    (tree / "mail").mkdir()
    page = (
        "# Leave\n\nAnnual leave is booked in the portal two weeks ahead; the team lead approves it and "
        "the calendar shows who is away during the summer.\n"
    )
    (tree / "hr" / "leave.md").write_text(page)
    (tree / "leave-copy.md").write_text(page)
    old = time.time() - 3600
    os.utime(tree / "hr" / "leave.md", (old, old))  # the oldest: the canonical copy, readable by hr only
    (tree / "mail" / "note.eml").write_text(
        "From: Jane Doe <jane.doe@example.org>\nTo: bob.smith@example.com\nSubject: Lunch\n"
        "Content-Type: text/plain\n\nSee you at noon in the canteen.\n"
    )
    (tmp_path / "acl.yaml").write_text(
        '- path: "hr/**"\n  principals: [group:hr]\n- path: "**"\n  principals: [public]\n'
    )
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    with quarry.open(db) as index:
        canonical = index.sql("SELECT doc_id FROM documents WHERE rel_path = 'hr/leave.md'").rows[0][0]
        index.export(tmp_path / "public", "jsonl", principals=[], redact="email")
        index.export(tmp_path / "hr", "jsonl", principals=["group:hr"])
        index.export(tmp_path / "public.jsonl", "jsonl", principals=[])
    public = tmp_path / "public"
    for name in ("documents.jsonl", "chunks.jsonl"):
        text = (public / name).read_text()
        assert "jane.doe@example.org" not in text and "bob.smith@example.com" not in text
        assert canonical not in text
    [note] = [d for d in read_jsonl(public / "documents.jsonl") if d["rel_path"] == "mail/note.eml"]
    assert "[EMAIL]" in json.loads(note["metadata"])["from"]
    [copy] = [d for d in read_jsonl(public / "documents.jsonl") if d["rel_path"] == "leave-copy.md"]
    assert copy["dup_of"] is None and copy["dup_cluster"] is None and copy["dup_similarity"] is None
    assert canonical not in (tmp_path / "public.jsonl").read_text()
    [copy] = [d for d in read_jsonl(tmp_path / "hr" / "documents.jsonl") if d["rel_path"] == "leave-copy.md"]
    assert copy["dup_of"] == canonical and copy["dup_cluster"] == canonical
