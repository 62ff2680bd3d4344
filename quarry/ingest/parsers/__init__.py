"""Turn a file into a ParsedDocument: text, title, headings, page offsets and metadata.

One registry, :data:`FORMATS`, maps each file type to its extensions, its parser and the
library doing the work; each format family lives in its own module and imports its library
only when called, so importing this package stays cheap. A file whose extension is unknown
is sniffed (:mod:`quarry.ingest.parsers.sniff`) before it is reported as unsupported.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass

from quarry.core.errors import ParseError, QuarryError, UnsupportedFile
from quarry.core.models import Heading, ParsedDocument
from quarry.core.paths import display
from quarry.core.safeio import read_regular


@dataclass(frozen=True)
class Format:
    """A file type quarry reads: its extensions, ``module:function`` parser and library."""

    name: str  # the file type stored with the document ("md", "pptx", ...)
    extensions: tuple[str, ...]
    parser: str  # "module:function"; the function takes (data, kind) or (data, kind, ocr=)
    library: str  # what does the reading, for ``quarry formats``
    requires: tuple[str, ...] = ()  # import names; missing ones are reported by ``quarry formats``
    structure: str = ""  # what structure is kept, for ``quarry formats`` and the README
    heavy: bool = False  # CPU-bound: parsed in the process pool, under the per-file timeout
    ocr: bool = False  # the parser takes ``ocr=`` (PDF pages without text, images)
    binaries: tuple[str, ...] = ()  # system programs it runs; missing ones are reported by ``quarry formats``
    archive: bool = False  # a container: its members are the documents (discovery lists them)
    encryption: bool = False  # checked for a password before parsing (parsers/encrypted.py)


_T, _S, _O, _M, _D, _L, _A = ("quarry.ingest.parsers.text", "quarry.ingest.parsers.sheets",
                              "quarry.ingest.parsers.office", "quarry.ingest.parsers.mail", "quarry.ingest.parsers.data",
                              "quarry.ingest.parsers.legacy", "quarry.ingest.parsers.archive")
FORMATS: tuple[Format, ...] = (
    Format("md", (".md", ".markdown", ".mdx"), f"{_T}:parse_text", "built in", (),
           "headings (ATX, setext), front matter"),
    Format("txt", (".txt", ".text", ".log"), f"{_T}:parse_text", "built in + charset-normalizer", (), "none"),
    Format("rst", (".rst",), f"{_T}:parse_text", "built in", (), "section titles"),
    Format("org", (".org",), f"{_D}:parse_markup", "built in", (), "outline headings (*, **)"),
    Format("adoc", (".adoc", ".asciidoc", ".asc"), f"{_D}:parse_markup", "built in", (), "section titles (=, ==)"),
    Format("html", (".html", ".htm", ".xhtml"), "quarry.ingest.parsers.html:parse_html", "selectolax", ("selectolax",),
           "h1-h6, tables as rows"),
    Format("pdf", (".pdf",), "quarry.ingest.parsers.pdf:parse_pdf", "pypdf; OCR: pypdfium2 + rapidocr-onnxruntime",
           ("pypdf",), "pages, outline headings; OCR of pages without text", heavy=True, ocr=True),
    Format("docx", (".docx",), "quarry.ingest.parsers.docx:parse_docx", "python-docx", ("docx",),
           "heading styles, tables in body order", heavy=True, encryption=True),
    Format("pptx", (".pptx", ".pptm"), f"{_O}:parse_pptx", "python-pptx", ("pptx",),
           "a section per slide (title, body, tables, notes); page = slide", heavy=True, encryption=True),
    Format("odt", (".odt",), f"{_O}:parse_odt", "odfpy", ("odf",), "headings, tables", heavy=True, encryption=True),
    Format("rtf", (".rtf",), f"{_O}:parse_rtf", "striprtf", ("striprtf",), "none (RTF keeps no heading marks)"),
    Format("epub", (".epub",), f"{_O}:parse_epub", "ebooklib + selectolax", ("ebooklib",),
           "chapters in spine order, their h1-h6", heavy=True),
    Format("xlsx", (".xlsx", ".xlsm"), f"{_S}:parse_sheets", "openpyxl", ("openpyxl",),
           "a section per sheet; header row repeated on every row group", heavy=True, encryption=True),
    Format("xls", (".xls", ".xlt"), f"{_S}:parse_sheets", "xlrd", ("xlrd",), "as xlsx", heavy=True, encryption=True),
    Format("ods", (".ods",), f"{_S}:parse_sheets", "odfpy", ("odf",), "as xlsx", heavy=True, encryption=True),
    Format("csv", (".csv",), f"{_S}:parse_sheets", "csv + charset-normalizer", (),
           "header row repeated on every row group"),
    Format("tsv", (".tsv", ".tab"), f"{_S}:parse_sheets", "csv + charset-normalizer", (), "as csv"),
    Format("eml", (".eml",), f"{_M}:parse_mail", "email (stdlib)", (),
           "headers as metadata; text body; attachments as sections"),
    Format("msg", (".msg",), f"{_M}:parse_mail", "extract-msg", ("extract_msg",), "as eml", heavy=True),
    Format("mbox", (".mbox", ".mbx"), f"{_M}:parse_mail", "mailbox (stdlib)", (), "a section per message"),
    Format("json", (".json", ".jsonld", ".geojson"), f"{_D}:parse_data", "json (stdlib)", (),
           "key paths (user.address.city: Paris)"),
    Format("ndjson", (".ndjson", ".jsonl"), f"{_D}:parse_data", "json (stdlib)", (), "a section per record"),
    Format("yaml", (".yaml", ".yml"), f"{_D}:parse_data", "PyYAML", ("yaml",), "key paths; a section per document"),
    Format("xml", (".xml",), f"{_D}:parse_data", "lxml", ("lxml",), "element paths"),
    Format("ipynb", (".ipynb",), f"{_D}:parse_notebook", "json (stdlib)", (), "a section per cell, markdown headings"),
    Format("code", (".py", ".pyi", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".scala",
                    ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".sh", ".bash", ".sql",
                    ".r", ".lua", ".pl", ".toml", ".ini", ".cfg"),
           "quarry.ingest.parsers.code:parse_code", "ast (Python); a line heuristic elsewhere", (),
           "top-level definitions as sections"),
    Format("image", (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".gif", ".heic", ".heif"),
           "quarry.ingest.parsers.ocr:parse_image", "Pillow + rapidocr-onnxruntime (HEIC: pillow-heif)",
           ("PIL", "rapidocr_onnxruntime"), "OCR text; a page per TIFF frame", heavy=True, ocr=True),
    Format("doc", (".doc", ".dot"), f"{_L}:parse_legacy", "LibreOffice (headless) to DOCX, then python-docx", ("docx",),
           "as docx (converted)", heavy=True, binaries=("soffice",), encryption=True),
    Format("ppt", (".ppt", ".pps", ".pot"), f"{_L}:parse_legacy", "LibreOffice (headless) to PPTX, then python-pptx",
           ("pptx",), "as pptx (converted): a section and a page per slide", heavy=True, binaries=("soffice",),
           encryption=True),
    Format("zip", (".zip",), f"{_A}:parse_archive", "zipfile (stdlib)", (),
           "members indexed as documents: archive.zip!/dir/file.pdf", archive=True),
    Format("tar", (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz"), f"{_A}:parse_archive",
           "tarfile (stdlib)", (), "as zip", archive=True),
    Format("7z", (".7z",), f"{_A}:parse_archive", "py7zr", ("py7zr",), "as zip", archive=True),
)
BY_TYPE: dict[str, Format] = {f.name: f for f in FORMATS}
SUPPORTED: dict[str, str] = {ext: f.name for f in FORMATS for ext in f.extensions}
ARCHIVE_TYPES = frozenset(f.name for f in FORMATS if f.archive)


def describe_formats() -> list[dict]:
    """Each format with its extensions, library, kept structure, and the imports and programs it
    lacks here (for ``quarry formats``)."""
    import importlib.util
    import shutil

    from quarry.ingest.parsers.legacy import INSTALL_HINT, soffice
    from quarry.ingest.parsers.ocr import engine_name

    rows = []
    for f in FORMATS:
        missing = [m for m in f.requires if importlib.util.find_spec(m) is None]
        install = ["pip install -e . (the Python packages quarry depends on)"] if missing else []
        programs = {p: soffice() if p == "soffice" else shutil.which(p) for p in f.binaries}
        for program, where in programs.items():
            if where is None:
                missing.append(program)
                install.append(INSTALL_HINT if program == "soffice" else f"install {program}")
        if f.ocr and not engine_name():
            missing.append("rapidocr_onnxruntime or tesseract")
            install.append("pip install rapidocr-onnxruntime, or install tesseract")
        rows.append({"type": f.name, "extensions": list(f.extensions), "library": f.library,
                     "programs": programs, "structure": f.structure, "missing": missing,
                     "readable": not missing, "install": "; ".join(install)})
    return rows


def formats_markdown() -> str:
    """The table of docs/formats.md, from :data:`FORMATS` (``tests/test_docs_formats.py`` keeps them equal)."""
    lines = ["| type | extensions | read by | structure kept |", "|---|---|---|---|"]
    for f in FORMATS:
        library = f.library + (f" (needs the program `{'`, `'.join(f.binaries)}`)" if f.binaries else "")
        lines.append(f"| {f.name} | {' '.join(f'`{e}`' for e in f.extensions)} | {library} | {f.structure} |")
    return "\n".join(lines)


def file_type_for(path: str) -> str:
    """The file type quarry reads ``path`` as ("md", "pdf", "tar", ...) by its suffix, or "" when unknown."""
    name = os.path.basename(path).lower()
    stem, ext = os.path.splitext(name)
    return SUPPORTED.get(os.path.splitext(stem)[1] + ext) or SUPPORTED.get(ext, "")


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
    return sanitize(doc, digest)


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
    try:
        return int(float(os.environ.get("QUARRY_MAX_FILE_MB", "256")) * (1 << 20))
    except ValueError:
        return 256 << 20


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
    doc.sha256 = digest
    return doc


def one_line(exc: BaseException) -> str:
    """``exc`` as ``"Type: first line of message"``, for one-line error reports."""
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__
