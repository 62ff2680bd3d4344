"""The file formats quarry reads: :class:`Format`, and the built-ins registered in
:data:`~quarry.core.registry.FORMATS`.

A plugin adds a format the same way, from its own package: a :class:`Format` whose ``parser``
names its own ``module:function`` (taking the file's bytes and its type, and returning a
:class:`~quarry.core.models.ParsedDocument`), declared under the entry point group
``quarry.formats`` (the Format itself, a list of them, or a module that calls
``FORMATS.add(fmt.name, fmt)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from quarry.core.registry import FORMATS

__all__ = ["Format", "FORMATS", "BUILTINS"]


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
    # Raised when the parser cuts the same bytes differently: the next run re-parses this format's
    # documents, and only those (quarry.ingest.parsers.stale_formats, quarry/ingest/plan.py, plan_run).
    version: int = 1


_T, _S, _O, _M, _D, _L, _A = (
    "quarry.ingest.parsers.text",
    "quarry.ingest.parsers.sheets",
    "quarry.ingest.parsers.office",
    "quarry.ingest.parsers.mail",
    "quarry.ingest.parsers.data",
    "quarry.ingest.parsers.legacy",
    "quarry.ingest.parsers.archive",
)
BUILTINS: tuple[Format, ...] = (
    Format(
        "md",
        (".md", ".markdown", ".mdx"),
        f"{_T}:parse_text",
        "built in",
        (),
        "headings (ATX, setext), front matter",
        version=2,
    ),  # 2: link targets left out of the embedded text (quarry.core.models.without_markup)
    Format("txt", (".txt", ".text", ".log"), f"{_T}:parse_text", "built in + charset-normalizer", (), "none"),
    Format("rst", (".rst",), f"{_T}:parse_text", "built in", (), "section titles"),
    Format("org", (".org",), f"{_D}:parse_markup", "built in", (), "outline headings (*, **)"),
    Format("adoc", (".adoc", ".asciidoc", ".asc"), f"{_D}:parse_markup", "built in", (), "section titles (=, ==)"),
    Format(
        "html",
        (".html", ".htm", ".xhtml"),
        "quarry.ingest.parsers.html:parse_html",
        "selectolax",
        ("selectolax",),
        "h1-h6, tables as rows",
    ),
    Format(
        "pdf",
        (".pdf",),
        "quarry.ingest.parsers.pdf:parse_pdf",
        "pypdf; layout: pypdfium2; OCR: pypdfium2 + rapidocr-onnxruntime",
        ("pypdf",),
        "pages, headings (outline, else font size/weight), page titles, tables with title and columns; "
        "OCR of pages without text",
        heavy=True,
        ocr=True,
        version=2,
    ),  # 2: layout headings, tables, page titles
    Format(
        "docx",
        (".docx",),
        "quarry.ingest.parsers.docx:parse_docx",
        "python-docx",
        ("docx",),
        "heading styles, tables in body order",
        heavy=True,
        encryption=True,
    ),
    Format(
        "pptx",
        (".pptx", ".pptm"),
        f"{_O}:parse_pptx",
        "python-pptx",
        ("pptx",),
        "a section per slide (title, body, tables, notes); page = slide",
        heavy=True,
        encryption=True,
    ),
    Format("odt", (".odt",), f"{_O}:parse_odt", "odfpy", ("odf",), "headings, tables", heavy=True, encryption=True),
    Format("rtf", (".rtf",), f"{_O}:parse_rtf", "striprtf", ("striprtf",), "none (RTF keeps no heading marks)"),
    Format(
        "epub",
        (".epub",),
        f"{_O}:parse_epub",
        "ebooklib + selectolax",
        ("ebooklib",),
        "chapters in spine order, their h1-h6",
        heavy=True,
    ),
    Format(
        "xlsx",
        (".xlsx", ".xlsm"),
        f"{_S}:parse_sheets",
        "openpyxl",
        ("openpyxl",),
        "a section per sheet; header row repeated on every row group",
        heavy=True,
        encryption=True,
    ),
    Format("xls", (".xls", ".xlt"), f"{_S}:parse_sheets", "xlrd", ("xlrd",), "as xlsx", heavy=True, encryption=True),
    Format("ods", (".ods",), f"{_S}:parse_sheets", "odfpy", ("odf",), "as xlsx", heavy=True, encryption=True),
    Format(
        "csv", (".csv",), f"{_S}:parse_sheets", "csv + charset-normalizer", (), "header row repeated on every row group"
    ),
    Format("tsv", (".tsv", ".tab"), f"{_S}:parse_sheets", "csv + charset-normalizer", (), "as csv"),
    Format(
        "eml",
        (".eml",),
        f"{_M}:parse_mail",
        "email (stdlib)",
        (),
        "headers as metadata; text body; attachments as sections",
    ),
    Format("msg", (".msg",), f"{_M}:parse_mail", "extract-msg", ("extract_msg",), "as eml", heavy=True),
    Format("mbox", (".mbox", ".mbx"), f"{_M}:parse_mail", "mailbox (stdlib)", (), "a section per message"),
    Format(
        "json",
        (".json", ".jsonld", ".geojson"),
        f"{_D}:parse_data",
        "json (stdlib)",
        (),
        "key paths (user.address.city: Paris)",
    ),
    Format("ndjson", (".ndjson", ".jsonl"), f"{_D}:parse_data", "json (stdlib)", (), "a section per record"),
    Format("yaml", (".yaml", ".yml"), f"{_D}:parse_data", "PyYAML", ("yaml",), "key paths; a section per document"),
    Format("xml", (".xml",), f"{_D}:parse_data", "lxml", ("lxml",), "element paths"),
    Format("ipynb", (".ipynb",), f"{_D}:parse_notebook", "json (stdlib)", (), "a section per cell, markdown headings"),
    Format(
        "code",
        (
            ".py",
            ".pyi",
            ".js",
            ".mjs",
            ".ts",
            ".tsx",
            ".jsx",
            ".go",
            ".rs",
            ".java",
            ".kt",
            ".scala",
            ".c",
            ".h",
            ".cc",
            ".cpp",
            ".hpp",
            ".cs",
            ".rb",
            ".php",
            ".swift",
            ".sh",
            ".bash",
            ".sql",
            ".r",
            ".lua",
            ".pl",
            ".toml",
            ".ini",
            ".cfg",
        ),
        "quarry.ingest.parsers.code:parse_code",
        "ast (Python); a line heuristic elsewhere",
        (),
        "top-level definitions as sections",
    ),
    Format(
        "image",
        (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".gif", ".heic", ".heif"),
        "quarry.ingest.parsers.ocr:parse_image",
        "Pillow + rapidocr-onnxruntime (HEIC: pillow-heif)",
        ("PIL", "rapidocr_onnxruntime"),
        "OCR text; a page per TIFF frame",
        heavy=True,
        ocr=True,
    ),
    Format(
        "doc",
        (".doc", ".dot"),
        f"{_L}:parse_legacy",
        "LibreOffice (headless) to DOCX, then python-docx",
        ("docx",),
        "as docx (converted)",
        heavy=True,
        binaries=("soffice",),
        encryption=True,
    ),
    Format(
        "ppt",
        (".ppt", ".pps", ".pot"),
        f"{_L}:parse_legacy",
        "LibreOffice (headless) to PPTX, then python-pptx",
        ("pptx",),
        "as pptx (converted): a section and a page per slide",
        heavy=True,
        binaries=("soffice",),
        encryption=True,
    ),
    Format(
        "zip",
        (".zip",),
        f"{_A}:parse_archive",
        "zipfile (stdlib)",
        (),
        "members indexed as documents: archive.zip!/dir/file.pdf",
        archive=True,
    ),
    Format(
        "tar",
        (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz"),
        f"{_A}:parse_archive",
        "tarfile (stdlib)",
        (),
        "as zip",
        archive=True,
    ),
    Format("7z", (".7z",), f"{_A}:parse_archive", "py7zr", ("py7zr",), "as zip", archive=True),
)
for _format in BUILTINS:
    FORMATS.add(_format.name, _format)
