"""Turn a file into a ParsedDocument: text, title, headings, page offsets and metadata.

One registry, :data:`FORMATS` (quarry/core/registry.py; the built-ins in
:mod:`quarry.ingest.parsers.formats`, plugins by entry point ``quarry.formats``), maps each file type
to its extensions, its parser and the library doing the work; each format family lives in its own
module and imports its library only when called, so importing this package stays cheap. A file whose extension is unknown
is sniffed (:mod:`quarry.ingest.parsers.sniff`) before it is reported as unsupported.
"""

from __future__ import annotations

import functools
import importlib
import os
import re

from quarry.core.environment import environment
from quarry.core.errors import ParseError, QuarryError, UnsupportedFile
from quarry.core.models import Heading, ParsedDocument, Table
from quarry.core.paths import display
from quarry.core.registry import FORMATS
from quarry.core.safeio import read_regular
from quarry.ingest.parsers.formats import Format  # noqa: F401 - what a plugin builds its format with


class _View:
    """A read-only view over :data:`FORMATS` that follows the registry as plugins add to it
    (computed again when the registry's version changes)."""

    def __init__(self, build):
        self._build = build
        self._seen = -1
        self._value = None

    def _get(self):
        FORMATS.load()  # the built-ins and the plugins first
        if self._seen != FORMATS.version:
            self._value, self._seen = self._build(FORMATS.values()), FORMATS.version
        return self._value

    def __contains__(self, key) -> bool:
        return key in self._get()

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, key):
        return self._get()[key]

    def get(self, key, default=None):
        return self._get().get(key, default)

    def values(self):
        return self._get().values()

    def items(self):
        return self._get().items()


BY_TYPE = _View(lambda formats: {f.name: f for f in formats})  # type -> Format
SUPPORTED = _View(lambda formats: {ext: f.name for f in formats for ext in f.extensions})  # suffix -> type
ARCHIVE_TYPES = _View(lambda formats: {f.name: f for f in formats if f.archive})  # archive types


def format_versions() -> dict[str, int]:
    """Each format's parser version (:attr:`Format.version`), as a commit records it in the catalog's
    meta (``format_versions``)."""
    return {name: fmt.version for name, fmt in BY_TYPE.items()}


def stale_formats(recorded: str | None) -> set[str]:
    """The formats whose parser version differs from the one a store recorded (``recorded``: the
    JSON of :func:`format_versions`; a store from before versions were recorded was cut by version 1
    of every parser): their documents are parsed again."""
    import json

    try:
        then = json.loads(recorded) if recorded else {}
    except ValueError:
        then = {}
    return {name for name, version in format_versions().items() if int(then.get(name, 1)) != version}


def file_type_for(path: str) -> str:
    """The file type quarry reads ``path`` as ("md", "pdf", "tar", ...) by its suffix, or "" when unknown."""
    name = path[path.rfind(os.sep) + 1 :]  # os.path.basename; discovery asks once a file, so each call counts
    if os.altsep:
        name = name[name.rfind(os.altsep) + 1 :]
    stem, ext = _split_suffix(name.lower())
    version = FORMATS.version
    # the suffix before it matters only where a two-part suffix ends with this one (".tar" + ".gz")
    inner = _split_suffix(stem)[1] if ext in _outer_suffixes(version) else ""
    return _type_of_suffixes(inner, ext, version)


@functools.lru_cache(maxsize=8)
def _outer_suffixes(version: int) -> frozenset[str]:
    """The last suffixes of the registry's two-part suffixes (".gz" of ".tar.gz"), per registry version."""
    return frozenset("." + ext.rsplit(".", 1)[1] for ext in SUPPORTED if ext.count(".") > 1)


def _split_suffix(name: str) -> tuple[str, str]:
    """``os.path.splitext`` of a bare name (no folder): the suffix from the last dot, unless only
    dots come before it (".bashrc" has none)."""
    dot = name.rfind(".")
    if dot <= 0 or not name[:dot].lstrip("."):
        return name, ""
    return name[:dot], name[dot:]


@functools.lru_cache(maxsize=1024)
def _type_of_suffixes(inner: str, ext: str, version: int) -> str:
    """The type of a name ending ``inner + ext`` (``.tar`` + ``.gz``), kept per suffix pair and
    registry version: discovery asks once per file, and a tree has few suffixes."""
    return SUPPORTED.get(inner + ext) or SUPPORTED.get(ext, "")


def detect_type(path: str) -> str:
    """The file type by suffix, else by content (magic bytes, text detection); "" when unreadable."""
    kind = file_type_for(path)
    if kind or os.path.splitext(path)[1].lower() in _NEVER_SNIFF:
        return kind
    from quarry.ingest.parsers.sniff import sniff_file

    return sniff_file(path)


# Suffixes of formats known to hold no indexable text: not worth opening to sniff.
_NEVER_SNIFF = frozenset(
    ".zip .gz .tgz .bz2 .xz .zst .7z .rar .tar .jar .whl .exe .dll .so .dylib .o .a .class .pyc .bin "
    ".mp3 .mp4 .m4a .wav .flac .ogg .mov .avi .mkv .webm .woff .woff2 .ttf .otf .eot .ico .svgz "
    ".sqlite .db .duckdb .lance .parquet .arrow .npy .npz .pkl .pt .onnx "
    # text, but drawing or styling instructions rather than prose: noise in search results
    ".svg .css .map".split()
)


def parse_file(path: str, file_type: str | None = None, ocr: bool = True) -> ParsedDocument:
    """Parse the file at ``path`` (its type from the suffix unless ``file_type`` is given).

    ``ocr`` lets the PDF parser OCR pages without a text layer and the image parser read
    images at all. Raises UnsupportedFile for a type quarry does not read, and ParseError,
    with a one-line reason, for a supported file that cannot be read. No library exception escapes.
    (A member of an archive is read with its archive's other members: ``parse_data``.)
    """
    kind = file_type if file_type is not None else file_type_for(path)
    if kind not in BY_TYPE:
        raise UnsupportedFile(f"unsupported file type: {display(os.path.basename(path))}")
    # Never blocks on a FIFO, refuses what is not a regular file, hashes exactly what is parsed.
    data, digest = read_regular(path, limit=max_file_bytes())
    return parse_data(data, kind, digest, ocr=ocr)


def parse_data(data: bytes, kind: str, digest: str | None, ocr: bool = True) -> ParsedDocument:
    """Parse a whole file's bytes as ``kind`` and stamp the document with ``digest``, the identity
    of those bytes (their sha256; an archive member's own, see parsers/archive.py)."""
    if kind not in BY_TYPE:
        raise UnsupportedFile(f"unsupported file type: {kind}")
    limit = max_file_bytes()
    if limit and len(data) > limit:
        raise ParseError(f"file is over the {limit >> 20} MB limit (QUARRY_MAX_FILE_MB); skipped")
    if not data:  # empty, whatever the type: counted as an empty document, not a failure
        return ParsedDocument(text="", sha256=digest)
    doc = parse_bytes(data, kind, ocr=ocr)
    del data
    doc = sanitize(doc, digest)
    from quarry.ingest.facets import stated_facets  # a filing states its type, period, company and aliases

    for key, value in stated_facets(doc.text, doc.title).items():
        doc.metadata.setdefault(key, value)
    return doc


def parse_bytes(data: bytes, kind: str, ocr: bool = True) -> ParsedDocument:
    """Parse ``data`` as file type ``kind`` (see :func:`parse_file`); used for mail attachments too."""
    fmt = BY_TYPE.get(kind)
    if fmt is None:
        raise UnsupportedFile(f"unsupported file type: {kind}")
    if not data:  # empty, whatever the type: counted as an empty document, not a failure
        return ParsedDocument(text="")
    if fmt.encryption:
        from quarry.ingest.parsers.encrypted import check_encrypted

        check_encrypted(data, kind)
    actual = _by_content(data, kind)
    if actual != kind:  # a .doc that is an OOXML package, RTF or HTML; a .docx that is a legacy DOC
        return parse_bytes(data, actual, ocr=ocr)
    module, name = fmt.parser.split(":")
    try:
        parse = getattr(importlib.import_module(module), name)
        if fmt.ocr:
            return parse(data, kind, ocr=ocr)
        return parse(data, kind)
    except QuarryError:
        raise
    except ImportError as exc:
        raise ParseError(f"cannot parse {kind}: {exc.name} is not installed (pip install -e .)") from exc
    except RecursionError as exc:
        raise ParseError(f"cannot parse {kind}: nested too deeply") from exc
    except Exception as exc:  # anything a library raises on odd input is this file's problem
        raise ParseError(f"cannot parse {kind}: {one_line(exc)}") from exc


# Types whose files carry a signature: a file named as one of them whose bytes say it is another
# readable type is parsed as what it is (old shares hold many an RTF or HTML file named .doc).
_SIGNED = frozenset("doc ppt xls docx pptx xlsx odt ods epub msg pdf rtf".split())


def _by_content(data: bytes, kind: str) -> str:
    if kind not in _SIGNED:
        return kind
    from quarry.ingest.parsers.sniff import sniff_bytes, sniff_text

    actual = sniff_bytes(data)
    if actual is None and kind in ("doc", "ppt", "xls", "rtf"):  # not a binary signature: maybe text
        head = sniff_text(data[:8192])
        actual = head if head in ("html", "xml", "rtf") else None
    if not actual or actual not in BY_TYPE or actual == kind:
        return kind
    if actual == "xml" and kind != "xls":  # only an Excel 2003 XML sheet passes for a legacy file as XML
        return kind
    return actual


def max_file_bytes() -> int:
    """The largest file quarry reads (``QUARRY_MAX_FILE_MB``, default 256; 0 = no limit).

    A parser holds a file's bytes and text at once, so this bounds a worker's memory."""
    return int(environment().max_file_mb * (1 << 20))


# NUL (some exporters leave them; DuckDB strings and C libraries stop at them) becomes a space
# and a lone surrogate (from a broken PDF font map) the replacement character: one character
# for one, so offsets of headings and pages stay true.
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_MAX_TITLE = 500
_MAX_META = 2000


def _clean(text: str) -> str:
    return _BAD_CHARS.sub(lambda m: " " if m.group() == "\x00" else "\ufffd", text) if text else text


def sanitize(doc: ParsedDocument, digest: str | None = None) -> ParsedDocument:
    """``doc`` with text every store accepts (no NUL, no lone surrogates) and bounded titles and
    metadata (a hostile file can put a megabyte in its title), stamped with ``digest``."""
    doc.text = _clean(doc.text)
    if doc.title:
        doc.title = _clean(doc.title)[:_MAX_TITLE]
    doc.headings = [Heading(h.level, _clean(h.title)[:_MAX_TITLE], h.offset) for h in doc.headings]
    doc.metadata = {_clean(str(k))[:100]: _clean(str(v))[:_MAX_META] for k, v in doc.metadata.items()}
    doc.page_titles = [_clean(t)[:_MAX_TITLE] for t in doc.page_titles]
    doc.tables = [
        Table(t.start, t.end, _clean(t.title)[:_MAX_TITLE], _clean(t.columns)[:_MAX_TITLE]) for t in doc.tables
    ]
    doc.sha256 = digest
    return doc


def one_line(exc: BaseException) -> str:
    """``exc`` as ``"Type: first line of message"``, for one-line error reports."""
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__
