"""Legacy DOC and PPT through LibreOffice, files named for one format holding another, and
password-protected Office files named as such. The DOC and PPT files are written by LibreOffice
itself from the shared samples (``legacy_files`` in conftest); the encrypted XLSX by
msoffcrypto-tool from the shared one."""

from __future__ import annotations

import io
import json
import os
import stat
import time
import zipfile

import pytest

import quarry
from quarry.core.errors import ParseError
from quarry.ingest.parsers import parse_data, parse_file
from tests.conftest import shared

# --- DOC and PPT ------------------------------------------------------------------------------


def test_doc_is_converted_and_keeps_its_words_and_headings(legacy_files):
    doc = parse_file(str(legacy_files["simple.doc"]))
    assert "favorite things" in doc.text and "Parrots" in doc.text and "DOYLESTOWN" in doc.text
    assert doc.headings and doc.headings[0].title == "These are a few of my favorite things:"


def test_doc_tables_are_rows_in_body_order(legacy_files):
    doc = parse_file(str(legacy_files["docx-tables.doc"]))
    assert "Header Col 1 | Header Col 2\nLorem ipsum | A link example" in doc.text
    assert doc.text.index("Simple uniform table") < doc.text.index("Nested Table") < doc.text.index("merged cells")


def test_ppt_is_converted_with_a_page_per_slide(legacy_files):
    doc = parse_file(str(legacy_files["fake-power-point-table.ppt"]))
    assert "Tangerine | Pink | Aqua" in doc.text
    assert doc.page_offsets == [0] and doc.headings[0].title.startswith("Slide 1")


def test_the_legacy_files_of_a_batch_take_one_libreoffice_call_per_format(legacy_files, tmp_path, monkeypatch):
    from quarry.ingest.discover import discover
    from quarry.ingest.parsers import legacy
    from quarry.ingest.process import parse_files

    for name, path in legacy_files.items():
        (tmp_path / name).write_bytes(path.read_bytes())
    (tmp_path / "copy.doc").write_bytes(legacy_files["simple.doc"].read_bytes())
    (tmp_path / "damaged.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 500)
    files, _ = discover([tmp_path])
    calls = []
    real = legacy._run
    monkeypatch.setattr(
        legacy,
        "_run",
        lambda program, target, srcs, *a: calls.append((target, len(srcs))) or real(program, target, srcs, *a),
    )
    results = dict(zip((f.path.rsplit("/", 1)[1] for f in files), parse_files(files, workers=2)))
    # one call for the four DOCs, one for the PPT; the damaged DOC, which that call does not convert,
    # alone afterwards in the parse pool (whose calls this process does not see), naming its failure
    assert sorted(calls) == [("docx", 4), ("pptx", 1)]
    assert results["damaged.doc"].startswith("LibreOffice could not convert this legacy Word file")
    assert results["copy.doc"].text == results["simple.doc"].text == parse_file(str(legacy_files["simple.doc"])).text
    assert "Tangerine | Pink | Aqua" in results["fake-power-point-table.ppt"].text
    assert [
        results[f.path.rsplit("/", 1)[1]].sha256 for f in files if f.file_type != "doc" or "damaged" not in f.path
    ] == [f.sha256 for f in files if "damaged" not in f.path]  # stamped with the original's hash


def test_a_damaged_doc_is_a_named_failure(soffice, tmp_path):
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 500)
    with pytest.raises(ParseError, match="LibreOffice could not convert this legacy Word file"):
        parse_file(str(tmp_path / "old.doc"))


def test_without_libreoffice_a_doc_fails_saying_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_SOFFICE", str(tmp_path / "no-such-soffice"))
    (tmp_path / "old.ppt").write_bytes(shared("formats", "fake-power-point-table.pptx").read_bytes())
    (tmp_path / "real.ppt").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 500)
    with pytest.raises(ParseError, match=r"legacy PowerPoint needs LibreOffice, which is not installed: .*apt install"):
        parse_file(str(tmp_path / "real.ppt"))
    # a .ppt that is really a PPTX needs no converter
    assert "Tangerine" in parse_file(str(tmp_path / "old.ppt")).text


def _fake_soffice(tmp_path, body: str) -> str:
    script = tmp_path / "soffice"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_a_converter_that_hangs_is_stopped_by_the_file_timeout(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    # the program and a child of its own both hang, as soffice and soffice.bin would
    monkeypatch.setenv(
        "QUARRY_SOFFICE", _fake_soffice(tmp_path, f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait")
    )
    monkeypatch.setenv("QUARRY_PARSE_TIMEOUT", "2")
    started = time.monotonic()
    with pytest.raises(ParseError, match="LibreOffice took longer than 2 s"):
        parse_data(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 500, "doc", None)
    assert time.monotonic() - started < 15
    time.sleep(0.5)
    for pid in map(int, pids.read_text().split()):  # the whole process group is gone
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def test_quarry_formats_names_the_missing_converter(cli, tmp_path):
    done = cli("formats", "--json", env={"QUARRY_SOFFICE": str(tmp_path / "none")})
    rows = {r["type"]: r for r in json.loads(done.stdout)["formats"]}
    assert rows["doc"]["missing"] == ["soffice"] and not rows["doc"]["readable"]
    assert rows["ppt"]["missing"] == ["soffice"] and rows["docx"]["readable"]
    text = cli("formats", env={"QUARRY_SOFFICE": str(tmp_path / "none")}).stdout
    assert "missing soffice" in text and "libreoffice" in text.lower()


# --- a file named for one format, holding another ---------------------------------------------


@pytest.mark.parametrize(
    "name,source,words",
    [
        ("renamed.doc", ("formats", "docx-tables.docx"), "Lorem ipsum | A link example"),  # OOXML under a legacy name
        ("rich.doc", ("formats", "fake-doc.rtf"), "first paragraph"),  # RTF saved as .doc
        ("old.docx", None, "favorite things"),  # a legacy DOC under an OOXML name
    ],
)
def test_a_file_is_read_as_what_its_bytes_are(tmp_path, name, source, words, request):
    if source is None:
        data = request.getfixturevalue("legacy_files")["simple.doc"].read_bytes()
    else:
        data = shared(*source).read_bytes()
    (tmp_path / name).write_bytes(data)
    assert words in parse_file(str(tmp_path / name)).text


# --- encrypted ----------------------------------------------------------------------------------


def _encrypted_xlsx() -> bytes:
    from msoffcrypto.format.ooxml import OOXMLFile

    out = io.BytesIO()
    with open(shared("formats", "stanley-cups.xlsx"), "rb") as fh:
        OOXMLFile(fh).encrypt("secret", out)
    return out.getvalue()


def _encrypted_odt() -> bytes:
    # An ODF package written with a password keeps its manifest in clear, with encryption-data
    # for each encrypted part (what LibreOffice writes); the parts themselves are ciphertext.
    src = zipfile.ZipFile(shared("formats", "simple.odt"))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "META-INF/manifest.xml":
                data = data.replace(
                    b'manifest:full-path="content.xml"',
                    b'manifest:full-path="content.xml"><manifest:encryption-data '
                    b'manifest:checksum-type="SHA1/1K" manifest:checksum="x"/></manifest:file-entry'
                    b'><manifest:file-entry manifest:media-type="" manifest:full-path="x"',
                    1,
                )
            elif info.filename == "content.xml":
                data = os.urandom(len(data))
            zf.writestr(info, data)
    return out.getvalue()


@pytest.mark.parametrize("name,make", [("locked.xlsx", _encrypted_xlsx), ("locked.odt", _encrypted_odt)])
def test_encrypted_office_files_are_named_as_such(tmp_path, name, make):
    (tmp_path / name).write_bytes(make())
    with pytest.raises(ParseError, match=r"^encrypted \(password required\)$"):
        parse_file(str(tmp_path / name))


def test_legacy_and_encrypted_files_through_a_run(tmp_path, run_flow, legacy_files):
    tree = tmp_path / "tree"
    tree.mkdir()
    for name, path in legacy_files.items():
        (tree / name).write_bytes(path.read_bytes())
    (tree / "locked.xlsx").write_bytes(_encrypted_xlsx())
    report = run_flow([tree], tmp_path / "db")
    assert report["added"] == 3
    assert [(e["path"].rsplit("/", 1)[-1], e["error"]) for e in report["errors"]] == [
        ("locked.xlsx", "encrypted (password required)")
    ]
    with quarry.open(tmp_path / "db") as idx:
        for query, name in (
            ("Parrots Hockey", "simple.doc"),
            ("Tangerine Aqua", "fake-power-point-table.ppt"),
            ("Lorem ipsum link example", "docx-tables.doc"),
        ):
            hits = idx.search(query, k=3, mode="bm25").results
            assert hits and hits[0].path.endswith(name), (query, [h.path for h in hits])
        assert idx.search("Tangerine", k=1, mode="bm25").results[0].page_start == 1
