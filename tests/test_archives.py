"""Archives: members of ZIP, TAR(.GZ) and 7z files as documents named ``archive.zip!/dir/file``,
incremental by the archive's hash and each member's identity, bounded against bombs, filtered by
member paths. The archives hold the real files of ../shared/data."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

import quarry
from quarry.core.errors import ParseError
from quarry.ingest.discover import discover
from quarry.ingest.parsers import archive
from quarry.ingest.parsers.archive import listing, read_members
from quarry.ingest.process import parse_files
from tests.conftest import shared

FILES = {  # member name -> (shared file, words only it holds)
    "slides/fake-power-point-table.pptx": (("formats", "fake-power-point-table.pptx"), "Tangerine Aqua Purple"),
    "sheets/stanley-cups.xlsx": (("formats", "stanley-cups.xlsx"), "Maple Leafs TOR"),
    "mail/fake-email.eml": (("formats", "fake-email.eml"), "Violets are blue roses"),
    "simple.odt": (("formats", "simple.odt"), "favorite things parrots hockey"),
    "memo.pdf": (("formats", "fake-memo.pdf"), "bottles blankets laptops"),
}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))


def write_zip(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def write_tar(path: Path, members: dict[str, bytes], mode: str = "w:gz") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
    return path


def shared_members(names=FILES) -> dict[str, bytes]:
    return {name: shared(*FILES[name][0]).read_bytes() for name in names}


def _ids(files):
    return {f.rel_path: f for f in files}


# --- listing and reading ----------------------------------------------------------------------------


def test_zip_members_are_files_named_inside_their_archive(tmp_path):
    write_zip(tmp_path / "tree" / "bundle.zip", shared_members())
    errors = []
    readable, skipped = discover([tmp_path / "tree"], errors=errors)
    files = _ids(readable)
    assert set(files) == {f"bundle.zip!/{n}" for n in FILES} and not skipped and not errors
    pptx = files["bundle.zip!/slides/fake-power-point-table.pptx"]
    data = shared(*FILES["slides/fake-power-point-table.pptx"][0]).read_bytes()
    assert pptx.path == str((tmp_path / "tree" / "bundle.zip").resolve()) + "!/slides/fake-power-point-table.pptx"
    assert (pptx.file_type, pptx.size, pptx.archive) == (
        "pptx",
        len(data),
        str((tmp_path / "tree" / "bundle.zip").resolve()),
    )
    assert pptx.sha256 == archive.member_digest("zip", data)  # crc32 and size from the archive's directory


def test_members_of_a_batch_are_read_in_one_pass_and_parsed_like_files(tmp_path, monkeypatch):
    write_tar(tmp_path / "tree" / "docs.tar.gz", shared_members())
    readable, _ = discover([tmp_path / "tree"])
    opened = []
    real = archive._extract
    monkeypatch.setattr(
        archive, "_extract", lambda fh, kind, names: opened.append(sorted(names)) or real(fh, kind, names)
    )
    results = parse_files(readable, workers=2)
    assert len(opened) == 1 and len(opened[0]) == len(FILES)  # one decompression for the whole batch
    for f, doc in zip(readable, results):
        assert not isinstance(doc, str), (f.rel_path, doc)
        assert doc.sha256 == f.sha256  # a tar member's identity is the sha256 of its bytes
    text = {f.rel_path.split("!/")[1]: doc.text.lower() for f, doc in zip(readable, results)}
    for name, (_src, words) in FILES.items():
        assert words.split()[0].lower() in text[name]


def test_nested_archives_open_to_a_depth_and_no_further(tmp_path):
    md = b"# Deep\n\nThe narwhal tusk is a tooth.\n"
    level4 = write_zip(tmp_path / "l4.zip", {"deepest.md": md}).read_bytes()
    level3 = write_zip(tmp_path / "l3.zip", {"l4.zip": level4, "three.md": md}).read_bytes()
    level2 = write_tar(tmp_path / "l2.tar", {"l3.zip": level3, "two.md": md}, mode="w").read_bytes()
    write_zip(tmp_path / "tree" / "outer.zip", {"inner/l2.tar": level2, "one.md": md})
    errors = []
    readable, _ = discover([tmp_path / "tree"], errors=errors)
    assert archive.MAX_DEPTH == 3
    assert sorted(f.rel_path for f in readable) == [
        "outer.zip!/inner/l2.tar!/l3.zip!/three.md",
        "outer.zip!/inner/l2.tar!/two.md",
        "outer.zip!/one.md",
    ]
    assert [e.error for e in errors] == ["archive nested more than 3 deep: not opened"]
    assert errors[0].path.endswith("outer.zip!/inner/l2.tar!/l3.zip!/l4.zip")
    results = parse_files(readable)
    assert all("narwhal" in d.text for d in results)
    assert [d.sha256 for d in results] == [f.sha256 for f in readable]


def test_a_seven_zip_archive_and_an_encrypted_one(tmp_path):
    py7zr = pytest.importorskip("py7zr")
    tree = tmp_path / "tree"
    tree.mkdir()
    with py7zr.SevenZipFile(tree / "pack.7z", "w") as z:
        for name, data in shared_members(["mail/fake-email.eml", "simple.odt"]).items():
            z.writestr(data, name)
    with py7zr.SevenZipFile(tree / "locked.7z", "w", password="secret", header_encryption=True) as z:
        z.writestr(b"hidden words", "secret.txt")
    errors = []
    readable, _ = discover([tree], errors=errors)
    assert sorted(f.rel_path for f in readable) == ["pack.7z!/mail/fake-email.eml", "pack.7z!/simple.odt"]
    assert [(Path(e.path).name, e.error) for e in errors] == [("locked.7z", "encrypted (password required)")]
    docs = parse_files(readable)
    assert "Violets are blue" in docs[0].text and "Parrots" in docs[1].text
    assert [d.sha256 for d in docs] == [f.sha256 for f in readable]


def test_an_unchanged_archive_is_not_opened_again(tmp_path, monkeypatch):
    path = write_tar(tmp_path / "a.tar.gz", shared_members(["simple.odt"]))
    sha = archive.hashlib.sha256(path.read_bytes()).hexdigest()
    first = listing(str(path), "tar", sha)
    monkeypatch.setattr(archive, "list_members", lambda *a, **k: pytest.fail("listed again"))
    assert listing(str(path), "tar", sha) == first


# --- bounds ------------------------------------------------------------------------------------------


def test_an_archive_declaring_too_much_is_refused_before_inflating(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_MAX_ARCHIVE_MB", "1")
    write_zip(tmp_path / "tree" / "big.zip", {"a.txt": b"x" * (700 << 10), "b.txt": b"y" * (700 << 10)})
    errors = []
    readable, _ = discover([tmp_path / "tree"], errors=errors)
    assert not readable and len(errors) == 1
    assert errors[0].error.startswith("refused: ZIP archive would unpack to more than 1 MB (QUARRY_MAX_ARCHIVE_MB)")


def test_a_bomb_is_refused_by_its_ratio(tmp_path):
    zeros = b"\0" * (archive.RATIO_FLOOR + (1 << 20))
    write_zip(tmp_path / "tree" / "bomb.zip", {"zeros.txt": zeros, "note.md": b"# Note\n\nfine words\n"})
    write_tar(tmp_path / "tree" / "bomb.tar.gz", {"zeros.txt": zeros})
    errors = []
    readable, _ = discover([tmp_path / "tree"], errors=errors)
    causes = {e.path.rsplit("/", 1)[-1]: e.error for e in errors}
    assert causes["bomb.tar.gz"].startswith("refused: TAR archive unpacks to") and "a zip bomb" in causes["bomb.tar.gz"]
    assert causes["bomb.zip"].startswith("refused: ZIP archive unpacks to")


def test_too_many_members_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_MEMBERS", 3)
    write_zip(tmp_path / "tree" / "many.zip", {f"{i}.md": b"# x\n\ny\n" for i in range(4)})
    errors = []
    discover([tmp_path / "tree"], errors=errors)
    assert [e.error for e in errors] == ["refused: ZIP archive holds 4 members (limit 3)"]


def test_a_member_over_the_file_limit_fails_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_MAX_FILE_MB", "0.5")
    write_zip(tmp_path / "tree" / "mixed.zip", {"big.txt": os.urandom(600 << 10), "small.md": b"# Small\n\nok\n"})
    errors = []
    readable, _ = discover([tmp_path / "tree"], errors=errors)
    assert [f.rel_path for f in readable] == ["mixed.zip!/small.md"]
    assert [(e.path.rsplit("!/", 1)[1], e.error) for e in errors] == [
        ("big.txt", "file is over the 0 MB limit (QUARRY_MAX_FILE_MB); skipped")
    ]


def _mark_encrypted(path: Path, member: str) -> None:
    """Set the "encrypted" flag of ``member`` in a ZIP's local and central headers (what zip -e writes)."""
    data = bytearray(path.read_bytes())
    for sig, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        at = data.find(sig)
        while at >= 0:
            if data[at + name_at : at + name_at + len(member)] == member.encode():
                data[at + flag_at] |= 0x1
            at = data.find(sig, at + 4)
    path.write_bytes(bytes(data))


def test_an_encrypted_member_is_named_as_such(tmp_path):
    path = write_zip(tmp_path / "tree" / "mixed.zip", {"secret.md": b"# Secret\n", "open.md": b"# Open\n\nwords\n"})
    _mark_encrypted(path, "secret.md")
    errors = []
    readable, _ = discover([tmp_path / "tree"], errors=errors)
    assert [f.rel_path for f in readable] == ["mixed.zip!/open.md"]
    assert [(e.path.rsplit("!/", 1)[1], e.error) for e in errors] == [("secret.md", "encrypted (password required)")]


def test_a_member_whose_name_holds_the_separator_is_named_not_misread(tmp_path):
    write_tar(tmp_path / "tree" / "odd.tar", {"odd!/name.md": b"# Odd\n", "fine.md": b"# Fine\n"}, mode="w")
    errors = []
    readable, _ = discover([tmp_path / "tree"], errors=errors)
    assert [f.rel_path for f in readable] == ["odd.tar!/fine.md"]
    assert len(errors) == 1 and "a member name holding '!/'" in errors[0].error


def test_a_corrupt_archive_is_one_named_failure(tmp_path):
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "broken.zip").write_bytes(b"PK\x03\x04 not really")
    (tmp_path / "tree" / "broken.tar.gz").write_bytes(b"\x1f\x8b\x08 not really")
    errors = []
    discover([tmp_path / "tree"], errors=errors)
    causes = {Path(e.path).name: e.error for e in errors}
    assert causes["broken.zip"].startswith("corrupt ZIP archive: BadZipFile")
    assert causes["broken.tar.gz"].startswith("corrupt TAR archive")


def test_reading_a_member_that_left_the_archive_is_a_named_failure(tmp_path):
    path = write_zip(tmp_path / "a.zip", {"here.md": b"# Here\n"})
    got = {tuple(n): d for n, d, _ in read_members(str(path), [["here.md"], ["gone.md"]])}
    assert got[("here.md",)] == b"# Here\n"
    assert isinstance(got[("gone.md",)], ParseError) and "gone from the archive" in str(got[("gone.md",)])


# --- include / exclude ---------------------------------------------------------------------------------


def test_include_and_exclude_globs_apply_to_member_paths(tmp_path):
    write_zip(tmp_path / "tree" / "bundle.zip", shared_members())
    readable, _ = discover([tmp_path / "tree"], include=["*.eml", "*.odt"], exclude=["bundle.zip!/mail/*"])
    assert [f.rel_path for f in readable] == ["bundle.zip!/simple.odt"]
    readable, _ = discover([tmp_path / "tree"], include=["bundle.zip"])  # naming the archive takes all of it
    assert len(readable) == len(FILES)
    assert discover([tmp_path / "tree"], exclude=["*.zip"])[0] == []


# --- through the flow: search, incremental runs, moves and deletes -------------------------------------


def test_archives_through_runs(tmp_path, run_flow, cli):
    tree = tmp_path / "tree"
    members = shared_members()
    write_zip(tree / "bundle.zip", members)
    write_tar(tree / "old" / "mail.tar.gz", {"fake-email.eml": members["mail/fake-email.eml"]})
    write_zip(tree / "broken-inside.zip", {"bad.xlsx": b"PK\x03\x04 truncated", "ok.md": b"# Ok\n\nkumquat\n"})
    db = tmp_path / "db"
    first = run_flow([tree], db)
    assert first["added"] == len(FILES) + 2 and first["failed"] == 1
    root = str(tree.resolve())
    assert [e["path"] for e in first["errors"]] == [f"{root}/broken-inside.zip!/bad.xlsx"]
    assert "corrupt XLSX" in first["errors"][0]["error"]
    with quarry.open(db) as idx:
        for name, (_src, words) in FILES.items():
            hits = idx.search(words, k=3, mode="bm25", filters=quarry.Filter.build(path="bundle.zip")).results
            assert hits and hits[0].path == f"{root}/bundle.zip!/{name}", (words, [h.path for h in hits])
        slide = idx.search("Tangerine Aqua", k=1, mode="bm25").results[0]
        assert slide.page_start == 1
        only_mail = idx.search(
            "Violets are blue", k=5, mode="bm25", filters=quarry.Filter.build(path="old/mail.tar.gz!/*.eml")
        ).results
        assert {h.path for h in only_mail} == {f"{root}/old/mail.tar.gz!/fake-email.eml"}
    found = json.loads(cli("search", "kumquat", "--db", db, "--path", "broken-inside.zip", "--json").stdout)
    assert [r["path"] for r in found["results"]] == [f"{root}/broken-inside.zip!/ok.md"]

    again = run_flow([tree], db)  # nothing changed: nothing parsed, the failure reported again
    assert (again["added"], again["updated"], again["failed"], again["embedded_chunks"]) == (0, 0, 1, 0)

    # rewrite the archive with one member edited, one removed, one added: only those change
    members2 = dict(members)
    members2["mail/fake-email.eml"] = members["mail/fake-email.eml"].replace(b"Violets", b"Lilacs")
    del members2["memo.pdf"]
    members2["notes/new.md"] = b"# New\n\nA note about capybaras.\n"
    write_zip(tree / "bundle.zip", members2)
    third = run_flow([tree], db)
    assert (third["added"], third["updated"], third["deleted"], third["moved"]) == (1, 1, 1, 0)
    assert third["skipped"] == len(FILES) - 2 + 2  # unchanged members of both archives and ok.md

    (tree / "bundle.zip").rename(tree / "renamed.zip")  # a renamed archive moves its members
    fourth = run_flow([tree], db)
    assert (fourth["moved"], fourth["added"], fourth["deleted"]) == (len(members2), 0, 0)
    with quarry.open(db) as idx:
        hit = idx.search("capybaras", k=1, mode="bm25").results[0]
        assert hit.path == f"{root}/renamed.zip!/notes/new.md"

    (tree / "old" / "mail.tar.gz").write_bytes(b"\x1f\x8b\x08 damaged")  # unreadable: its members stay
    fifth = run_flow([tree], db)
    assert fifth["deleted"] == 0 and any(e["path"].endswith("mail.tar.gz") for e in fifth["errors"])
    (tree / "old" / "mail.tar.gz").unlink()  # gone: its members go
    sixth = run_flow([tree], db)
    assert sixth["deleted"] == 1
    with quarry.open(db) as idx:
        assert not idx.search("Violets", k=5, mode="bm25").results


def test_an_archive_given_as_the_root(tmp_path, run_flow):
    path = write_zip(tmp_path / "bundle.zip", shared_members(["simple.odt", "mail/fake-email.eml"]))
    db = tmp_path / "db"
    assert run_flow([path], db)["added"] == 2
    write_zip(path, shared_members(["simple.odt"]))
    assert run_flow([path], db)["deleted"] == 1  # the root's own members are in scope
