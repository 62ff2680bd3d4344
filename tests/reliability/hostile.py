"""Hostile trees, generated for real: the files an unattended run meets on shares nobody controls.

``make_tree(root)`` writes the tree and returns what must happen to each entry:
``indexed`` (searchable by its ``word``), ``failed`` (reported once, the cause matching ``cause``)
or ``skipped`` (neither indexed nor reported: special files, links out of the root, hidden).
Used by tests/reliability and by bench/reliability.py.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import socket
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

SHARED_FORMATS = Path(__file__).resolve().parents[3] / "shared" / "data" / "formats"


@dataclass
class Expect:
    name: bytes  # the entry's root-relative path, as bytes (names need not be UTF-8)
    outcome: str  # indexed | failed | skipped
    word: str = ""  # a word only this file holds (indexed)
    cause: str = ""  # a fragment of the reported cause (failed)


def _text(word: str, title: str = "Notes") -> bytes:
    return f"# {title}\n\nThis page is about the {word} and nothing else.\n".encode()


def pdf_bytes(pages: list[str] | int, encrypt: str | None = None) -> bytes:
    """A PDF written with pypdf: ``pages`` texts (one page each), or that many blank pages."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    if isinstance(pages, int):
        for _ in range(pages):
            writer.add_blank_page(612, 792)
    else:
        _text_pages(writer, pages)
    if encrypt:
        writer.encrypt(user_password=encrypt, owner_password=encrypt + "-owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _text_pages(writer, texts: list[str]) -> None:
    """Pages carrying real text objects (Helvetica), so pypdf extracts the words back."""
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    font_ref = writer._add_object(font)
    for text in texts:
        page = writer.add_blank_page(612, 792)
        safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
        )


def zip_bomb(inflated: int = 640 << 20) -> bytes:
    """A zip of a few MB that inflates to ``inflated`` bytes of zeros, with DOCX-looking parts."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        with zf.open("word/document.xml", "w", force_zip64=True) as fh:
            block = b"\0" * (1 << 20)
            for _ in range(inflated >> 20):
                fh.write(block)
    return out.getvalue()


def make_tree(root: Path, seed: int = 13) -> list[Expect]:
    """Write the hostile tree under ``root``; returns the expectation for each entry."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    broot = os.fsencode(root)
    expects: list[Expect] = []

    def put(name: bytes, data: bytes, outcome: str, word: str = "", cause: str = "") -> None:
        path = os.path.join(broot, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        expects.append(Expect(name, outcome, word, cause))

    # Names
    put("caf\xe9.md".encode("latin-1"), _text("okapi", "Caf\u00e9"), "indexed", "okapi")
    put(b"new\nline.md", _text("narwhal"), "indexed", "narwhal")
    put(b"tab\tname.md", _text("quetzal"), "indexed", "quetzal")
    put("emoji \U0001f9ea test.md".encode(), _text("axolotl"), "indexed", "axolotl")
    put(b"-rf --help.md", _text("pangolin"), "indexed", "pangolin")
    put(b'it\'s "quoted" $(x) `y`; DROP TABLE documents;--.md', _text("tapir"), "indexed", "tapir")
    long_name = b"l" * 252 + b".md"  # 255 bytes: the longest name ext4 and tmpfs allow
    put(long_name, _text("gharial"), "indexed", "gharial")
    deep = b"/".join([b"d"] * 200) + b"/deep.md"
    put(deep, _text("coelacanth"), "indexed", "coelacanth")
    # Contents
    put(b"empty.md", b"", "skipped")
    put(b"nul.md", b"# Export\n\nA broken export about wombats\x00\x00 left stray NUL bytes.\n", "indexed", "wombats")
    put(
        b"midfile.txt",
        b"Start about the dugong. " + b"\xff\xfe\xc3(" + " more text caf\u00e9.".encode(),
        "indexed",
        "dugong",
    )
    for ext in ("txt", "md"):
        put(
            f"random.{ext}".encode(),
            bytes(rng.getrandbits(8) for _ in range(20000)),
            "failed",
            cause="binary data under a text name",
        )
    put(b"random.pdf", bytes(rng.getrandbits(8) for _ in range(20000)), "failed", cause="not valid PDF")
    put(b"random.docx", bytes(rng.getrandbits(8) for _ in range(20000)), "failed", cause="corrupt DOCX")
    put(b"bomb.docx", zip_bomb(), "failed", cause="zip bomb")
    good_pdf = pdf_bytes(["The manatee page.", "The second page about the manatee herd."])
    put(b"good.pdf", good_pdf, "indexed", "manatee")
    put(
        b"truncated.pdf",
        pdf_bytes([f"Page {i} of the truncated file" for i in range(40)])[:3000],
        "failed",
        cause="PDF",
    )
    put(
        b"encrypted.pdf", pdf_bytes(["A secret about the aye-aye."], encrypt="hunter2"), "failed", cause="encrypted PDF"
    )
    put(b"blank.pdf", pdf_bytes(3), "failed", cause="no text layer (3 pages)")
    # Special files: never opened for a blocking read, never reported.
    os.mkfifo(os.path.join(broot, b"pipe.md"))
    expects.append(Expect(b"pipe.md", "skipped"))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(os.path.join(broot, b"sock.md"))
        expects.append(Expect(b"sock.md", "skipped"))
    except OSError:
        pass
    finally:
        sock.close()
    try:
        os.mknod(os.path.join(broot, b"dev.txt"), 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
        expects.append(Expect(b"dev.txt", "skipped"))
    except (OSError, AttributeError):
        pass
    # Links: loops end, links out of the root are not followed.
    os.makedirs(os.path.join(broot, b"loop"), exist_ok=True)
    os.symlink(b"..", os.path.join(broot, b"loop", b"up"))
    os.symlink(b"self", os.path.join(broot, b"self"))
    os.symlink(b"/etc", os.path.join(broot, b"etc-link"))
    os.symlink(b"/etc/passwd", os.path.join(broot, b"passwd.txt"))
    expects += [
        Expect(b"loop/up", "skipped"),
        Expect(b"self", "skipped"),
        Expect(b"etc-link", "skipped"),
        Expect(b"passwd.txt", "skipped"),
    ]
    if SHARED_FORMATS.is_dir():
        shutil.copy(SHARED_FORMATS / "password.pdf", root / "shared-password.pdf")
        expects.append(Expect(b"shared-password.pdf", "failed", cause="encrypted PDF"))
        shutil.copy(SHARED_FORMATS / "umlauts-non-utf8.md", root / "umlauts-non-utf8.md")
        expects.append(Expect(b"umlauts-non-utf8.md", "indexed"))
    return expects


def remove_tree(root: Path) -> None:
    """``shutil.rmtree`` that copes with names that are not UTF-8 and special files."""
    shutil.rmtree(os.fsencode(root), ignore_errors=True)
