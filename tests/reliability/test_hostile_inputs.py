"""Hostile inputs, tried for real: every entry of a generated hostile tree ends indexed or as one
named failure in the run report; nothing crashes, hangs or is read outside the root; a re-run
of the unchanged tree changes nothing and reports the same failures again.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from hostile import make_tree, pdf_bytes, remove_tree, zip_bomb

import quarry
from quarry.core import paths
from quarry.core.errors import ParseError
from quarry.core.models import FileInfo
from quarry.core.plans import CatalogDoc
from quarry.core.settings import Settings
from quarry.ingest.discover import discover
from quarry.ingest.parsers import parse_file
from quarry.ingest.plan import make_plan
from quarry.ingest.process import process_files


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    expects = make_tree(base / "tree")
    yield base, expects
    remove_tree(base)


def _run(cli, tree, db):
    done = cli("index", tree, "--db", db, timeout=600)
    with quarry.open(db) as idx:  # what `quarry runs --json` prints, without another process
        return done, idx.runs(1)[0]


def test_hostile_tree_indexes_reports_and_reruns_unchanged(hostile, cli):
    base, expects = hostile
    tree, db = base / "tree", base / "db"
    done, run = _run(cli, tree, db)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr

    reported = [(e["path"], e["error"]) for e in run["errors"]]
    failed = [e for e in expects if e.outcome == "failed"]
    for e in failed:
        shown = paths.display(os.fsdecode(os.path.join(os.fsencode(tree), e.name)))
        causes = [c for p, c in reported if p == shown]
        assert len(causes) == 1, (e.name, reported)
        assert e.cause in causes[0], (e.name, causes[0])
    assert len(reported) == len(failed), reported  # nothing else reported (special files, links)
    assert run["failed"] == len(failed)
    # One line per failure on stderr, whatever the name holds.
    assert sum(line.startswith("failed: ") for line in done.stderr.splitlines()) == len(failed)

    with quarry.open(db) as idx:
        for e in expects:
            if e.outcome == "indexed" and e.word:
                hits = idx.search(e.word, k=1, mode="bm25").results
                assert hits and e.word in hits[0].text, e.name
                assert hits[0].path == paths.display(os.fsdecode(os.path.join(os.fsencode(tree), e.name)))
        assert not idx.search("root:x:0:0 daemon nologin", k=5, mode="bm25").results  # no /etc through links
        con = idx.snapshot.con
        # The non-UTF-8 name is stored losslessly: display form + the exact bytes.
        rows = con.execute("SELECT path, path_bytes FROM documents WHERE path_bytes IS NOT NULL").fetchall()
        assert rows == [(str(tree) + "/caf\\xe9.md", os.fsencode(tree) + b"/caf\xe9.md")]
        n_docs = con.execute("SELECT count(*) FROM documents").fetchone()[0]
    assert n_docs == sum(e.outcome == "indexed" for e in expects)

    again, run2 = _run(cli, tree, db)
    assert again.returncode == 3 and "Traceback" not in again.stderr
    assert (run2["added"], run2["updated"], run2["moved"], run2["deleted"]) == (0, 0, 0, 0)
    assert run2["embedded_chunks"] == 0 and run2["model_calls"] == 0
    # Failures are reported on every run (the file may become readable), never as changes.
    assert sorted((e["path"], e["error"]) for e in run2["errors"]) == sorted(reported)


RANDOM = os.urandom(30000)


@pytest.mark.parametrize(
    "name,data,outcome",
    [
        ("zero.md", b"", "empty"),
        ("zero.pdf", b"", "empty"),
        ("zero.docx", b"", "empty"),
        ("random.txt", RANDOM, "binary data"),
        ("random.md", RANDOM, "binary data"),
        ("random.rst", RANDOM, "binary data"),
        ("random.html", RANDOM, "ok-or-error"),
        ("random.pdf", RANDOM, "not valid PDF"),
        ("random.docx", RANDOM, "corrupt DOCX"),
        ("nul.md", b"# T\n\nabout wombats\x00 here\x00\n", "wombats"),
        ("many-nul.md", b"\x00" * 5000 + b"# T\n\ntext\n", "binary data"),
        ("badutf8.txt", b"about the dugong \xff\xfe\xc3( and more", "dugong"),
        ("surrogate.md", "about the \udce9 kiwi".encode("utf-8", "surrogatepass"), "kiwi"),
        ("crlf-only.txt", b"\r\n" * 1000, "empty"),
        ("half-utf16.txt", "a lemur text".encode("utf-16")[:-1], "ok-or-error"),
    ],
)
def test_hostile_bytes_end_in_text_or_a_named_failure(tmp_path, name, data, outcome):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        doc = parse_file(str(path))
    except ParseError as exc:
        assert outcome in (str(exc), "ok-or-error") or outcome in str(exc), str(exc)
        assert "\n" not in str(exc)
        return
    if outcome == "empty":
        assert doc.text.strip() == ""
    elif outcome != "ok-or-error":
        assert outcome in doc.text
    assert "\x00" not in doc.text
    doc.text.encode("utf-8")  # no lone surrogates reach the stores


def test_pdfs_truncated_encrypted_and_without_text(tmp_path):
    cases = {
        "truncated.pdf": (pdf_bytes([f"page {i}" for i in range(30)])[:2000], "PDF"),
        "encrypted.pdf": (pdf_bytes(["secret"], encrypt="pw"), "encrypted PDF (password required)"),
        "blank.pdf": (pdf_bytes(4), "no text layer (4 pages)"),
    }
    for name, (data, cause) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ParseError, match=r".*") as info:
            parse_file(str(tmp_path / name))
        assert cause in str(info.value), (name, str(info.value))
    (tmp_path / "ok.pdf").write_bytes(pdf_bytes(["The capybara page."]))
    assert "capybara" in parse_file(str(tmp_path / "ok.pdf")).text


def test_zip_bomb_docx_is_refused_before_inflating(tmp_path):
    path = tmp_path / "bomb.docx"
    path.write_bytes(zip_bomb(600 << 20))
    with pytest.raises(ParseError, match="zip bomb"):
        parse_file(str(path))


def _hang_guard(fn, *args):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it blocks."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), f"{fn.__name__} blocked (a FIFO opened for a blocking read?)"
    return out


def test_special_files_are_skipped_never_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.md")
    (tmp_path / "a.md").write_text("# A\n\nfine\n")
    os.symlink("/etc/passwd", tmp_path / "passwd.md")
    os.symlink("loop", tmp_path / "loop")
    errors: list = []
    out = _hang_guard(discover, [tmp_path], (), (), errors)
    readable, skipped = out["value"]
    assert [f.rel_path for f in readable] == ["a.md"] and not skipped and not errors
    # A FIFO handed to the parser directly is refused, not read.
    out = _hang_guard(parse_file, str(tmp_path / "pipe.md"))
    assert isinstance(out.get("error"), ParseError) and "FIFO" in str(out["error"])


def _info(path: Path, root: Path) -> FileInfo:
    from quarry.ingest.discover import sha256_file

    st = path.stat()
    return FileInfo(str(path), str(root), path.name, "md", st.st_size, st.st_mtime, sha256_file(str(path)))


@pytest.mark.parametrize("change", ["deleted", "truncated", "rewritten", "fifo", "directory", "symlink-out"])
def test_files_changing_between_discovery_and_parse(tmp_path, change):
    """What discovery saw is gone or different when the parser reads it: a named failure, or the
    new bytes indexed with *their* hash (never the old hash with the new text)."""
    path = tmp_path / "f.md"
    path.write_text("# Before\n\nThe original text about ibexes.\n")
    info = _info(path, tmp_path)
    if change == "deleted":
        path.unlink()
    elif change == "truncated":
        path.write_bytes(path.read_bytes()[:12])
    elif change == "rewritten":
        path.write_text("# After\n\nA rewritten text about oryxes.\n")
    elif change == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif change == "directory":
        path.unlink()
        path.mkdir()
    else:
        path.unlink()
        os.symlink("/etc/passwd", path)
    settings = Settings.from_env(embed_backend="hash")
    records, errors, empty = _hang_guard(process_files, [(info, "doc1")], settings)["value"]
    if change in ("truncated", "rewritten"):
        assert not errors and len(records) == 1
        import hashlib

        assert records[0].file.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() != info.sha256
        assert ("oryxes" in records[0].chunks[0].text) == (change == "rewritten")
    else:
        assert not records and len(errors) == 1, errors
        cause = errors[0].error
        assert {"deleted": "disappeared", "fifo": "FIFO", "directory": "directory", "symlink-out": "symbolic link"}[
            change
        ] in cause, cause


def test_unreadable_file_is_reported_and_keeps_its_document(tmp_path, monkeypatch):
    """Root reads anything, so ``chmod 000`` cannot provoke EACCES here: the OS call that opens
    the file is made to fail the way it does for another user. The real-process run of a path
    that turns into a directory (test above) covers the same code path without the patch."""
    import quarry.core.safeio as safeio

    (tmp_path / "ok.md").write_text("# Ok\n\nreadable\n")
    (tmp_path / "secret.md").write_text("# Secret\n\nnot for us\n")
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if os.fsdecode(path).endswith("secret.md"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(safeio.os, "open", fake_open)
    errors: list = []
    readable, _ = discover([tmp_path], errors=errors)
    assert [f.rel_path for f in readable] == ["ok.md"]
    assert [(Path(e.path).name, e.error) for e in errors] == [("secret.md", "cannot read file: permission denied")]
    # Indexed by an earlier run, the document stays: an unreadable file is not a deleted one.
    catalog = [
        CatalogDoc("d-ok", str(tmp_path / "ok.md"), readable[0].sha256, readable[0].mtime),
        CatalogDoc("d-secret", str(tmp_path / "secret.md"), "old", 1.0),
    ]
    plan = make_plan(readable, catalog, [str(tmp_path)], unreadable={e.path for e in errors})
    assert not plan.removed and [d for _, d in plan.unchanged] == ["d-ok"]


def test_odd_names_round_trip_through_the_catalog(tmp_path):
    name = "caf\udce9 \n\t-x \U0001f9ea.md"
    assert paths.from_catalog(paths.display(name), paths.raw_bytes(name)) == name
    assert paths.display("plain é.md") == "plain é.md" and paths.raw_bytes("plain é.md") is None
    assert paths.printable("a\nb\tc\udce9") == "a\\nb\\tc\\xe9"
    from quarry.ingest.plan import new_doc_id

    f = FileInfo(name, "/", name, "md", 1, 1.0, "s")
    assert new_doc_id(f) == new_doc_id(replace(f))  # hashable, stable, no UnicodeEncodeError
