"""Plain-text formats: Markdown, plain text and reStructuredText.

Markdown structure comes from markdown-it-py's CommonMark block parser (heading tokens carry the
line numbers they start on) and front matter from PyYAML; a line scanner used before them
disagreed with CommonMark on 5 of the 10 cases in ``tests/test_parsers.py``.
reStructuredText titles are still found by :func:`rst_headings`.

Also home to :func:`decode_bytes`, the encoding detection the HTML and mail parsers share.
"""

from __future__ import annotations

import codecs
import json
import re

from quarry.core.errors import ParseError
from quarry.core.models import Heading, ParsedDocument

# UTF-32 first: its little-endian BOM starts with the UTF-16 one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SNIFF = 8192
# C0 controls that never occur in text; tab, line and form feeds, CR and ESC (ANSI colours) do.
_CONTROL_BYTES = frozenset(range(0x20)) - {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1B}
_BINARY = "binary data under a text name"
# Stray NULs in otherwise valid text (broken exports, padded files) are dropped; a file with more
# than this share of NUL bytes (and more than a handful) is binary. Random bytes hold about 0.4%
# NULs; they fail the control-character test that follows.
_MAX_NUL_SHARE = 0.01
_FEW_NULS = 64


def decode_bytes(data: bytes, declared: str | None = None) -> str:
    """Decode file bytes to text with newlines normalised to ``\\n``.

    Order: byte-order mark, BOM-less UTF-16, strict UTF-8, the ``declared`` encoding (an HTML
    meta charset), charset-normalizer, then cp1252 and latin-1. A few stray NUL bytes are
    dropped; raises ParseError for data that looks binary (more than 1% NUL bytes outside
    UTF-16/32, or many control characters).
    """
    text = _decode(data, declared)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _decode(data: bytes, declared: str | None) -> str:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    wide = _sniff_utf16(data[:_SNIFF])
    if wide:
        return data.decode(wide, errors="replace")
    nuls = data.count(b"\x00")
    if nuls:
        if nuls > max(_FEW_NULS, _MAX_NUL_SHARE * len(data)):
            raise ParseError(_BINARY)
        data = data.replace(b"\x00", b"")
    head = data[:_SNIFF]
    if sum(b in _CONTROL_BYTES for b in head) > 0.05 * len(head):
        raise ParseError(_BINARY)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    # A declared charset is only trusted once UTF-8 failed: pages that declare latin-1 but
    # are UTF-8 are common, while valid non-ASCII UTF-8 that is really latin-1 is not.
    if declared:
        try:
            return data.decode(_codec(declared))
        except (LookupError, UnicodeDecodeError):
            pass
    import charset_normalizer

    matches = charset_normalizer.from_bytes(data)
    best = matches.best()
    if best is not None:
        # Short Western text often scores the same in cp1250, cp1252 and cp1257; the tie goes
        # to cp1252, by far the most common of them.
        tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
        if any("cp1252" in m.could_be_from_charset for m in tied):
            try:
                return data.decode("cp1252")
            except UnicodeDecodeError:
                pass
        return str(best)
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _codec(name: str) -> str:
    # HTML5 reads latin-1 and ASCII declarations as windows-1252, as browsers do.
    name = codecs.lookup(name.strip()).name
    return "cp1252" if name in ("latin-1", "iso8859-1", "ascii") else name


def unicode_codec(data: bytes) -> str | None:
    """The codec of text stored as UTF-8 with a BOM, UTF-16/32 with a BOM, or BOM-less UTF-16
    (what Windows tools write), else None: the bytes are an 8-bit encoding."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return codec
    return _sniff_utf16(data[:_SNIFF])


def _sniff_utf16(head: bytes) -> str | None:
    """'utf-16-le'/'utf-16-be' when BOM-less data has NULs in every other byte, else None."""
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    even_nuls, odd_nuls = even.count(0) / len(even), odd.count(0) / len(odd)
    if odd_nuls > 0.3 and even_nuls < 0.02:
        return "utf-16-le"
    if even_nuls > 0.3 and odd_nuls < 0.02:
        return "utf-16-be"
    return None


def parse_text(data: bytes, file_type: str = "txt") -> ParsedDocument:
    """Parse Markdown (``md``), reStructuredText (``rst``) or plain text (``txt``) bytes.

    An empty or whitespace-only file gives ``ParsedDocument(text="")``.
    """
    text = decode_bytes(data)
    if not text.strip():
        return ParsedDocument(text="")
    metadata: dict[str, str] = {}
    headings: list[Heading] = []
    if file_type == "md":
        text, metadata = split_front_matter(text)
        headings = markdown_headings(text)
    elif file_type == "rst":
        headings = rst_headings(text)
    title = metadata.get("title") or _pick_title(headings)
    return ParsedDocument(text=text, title=title, headings=headings, metadata=metadata)


def _pick_title(headings: list[Heading]) -> str | None:
    top = [h for h in headings if h.level == 1] or headings
    return top[0].title if top else None


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset, line) for each line; splits on ``\\n`` only, unlike str.splitlines."""
    out, offset = [], 0
    for line in text.split("\n"):
        out.append((offset, line))
        offset += len(line) + 1
    return out


def split_front_matter(text: str) -> tuple[str, dict[str, str]]:
    """Remove a leading YAML front-matter block (``---`` to ``---`` or ``...``); return the rest and
    its mapping.

    Keys are lower-cased; values are strings, as every parser's metadata: scalars as they were
    written (``date: 2024-01-05`` is ``"2024-01-05"``, ``version: 1.10`` stays ``"1.10"``: YAML's
    base loader, which makes no dates or floats), a list of scalars joined by ", " (as a mail's
    ``attachments``), anything nested as compact JSON. Empty values are dropped. A block that is
    not a YAML mapping (bad YAML, or prose between two thematic breaks) is not front matter: the
    text is returned whole.
    """
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return text, {}
    for end in range(1, len(lines)):
        if lines[end].rstrip() in ("---", "..."):
            break
    else:
        return text, {}
    import yaml

    try:
        data = yaml.load("\n".join(lines[1:end]), Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except yaml.YAMLError:
        return text, {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return text, {}
    metadata = {str(k).lower(): _meta_value(v) for k, v in data.items() if v not in ("", None, [], {})}
    return "\n".join(lines[end + 1 :]).lstrip("\n"), metadata


def _meta_value(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_MARKDOWN = None


def _markdown_parser():
    global _MARKDOWN
    if _MARKDOWN is None:
        from markdown_it import MarkdownIt

        # Block structure only: headings need no inline parsing (emphasis, links), the slow part.
        _MARKDOWN = MarkdownIt("commonmark").disable(["inline", "text_join"])
    return _MARKDOWN


def markdown_headings(text: str) -> list[Heading]:
    """ATX and setext headings of Markdown ``text`` as CommonMark reads it (markdown-it-py).

    Headings inside block quotes and list items count; ``#`` lines inside code, HTML blocks
    (``<!-- -->``, ``<pre>``) do not, nor does a lazy continuation line followed by ``---``.
    A heading's offset is the start of its first line; its title is the raw Markdown of the
    heading (lines of a setext heading joined by spaces); headings with no title are skipped.
    """
    starts = [0]
    for line in text.split("\n")[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    tokens = _markdown_parser().parse(text)
    headings: list[Heading] = []
    for i, token in enumerate(tokens):
        if token.type != "heading_open" or not token.map:
            continue
        title = " ".join(part.strip() for part in tokens[i + 1].content.split("\n")).strip()
        if title:
            headings.append(Heading(int(token.tag[1]), title, starts[token.map[0]]))
    return headings


_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1+\s*$")


def rst_headings(text: str) -> list[Heading]:
    """Section titles of reStructuredText ``text``; levels follow each adornment's first use."""
    lines = _lines(text)
    styles: list[tuple[str, bool]] = []
    headings: list[Heading] = []

    def add(style: tuple[str, bool], title: str, offset: int) -> None:
        if style not in styles:
            styles.append(style)
        headings.append(Heading(styles.index(style) + 1, title, offset))

    i = 0
    while i < len(lines) - 1:
        offset, line = lines[i]
        prev_blank = i == 0 or not lines[i - 1][1].strip()
        over = _ADORNMENT.match(line)
        if over and prev_blank and i + 2 < len(lines):
            # Overline, title (may be inset), underline of the same character.
            title = lines[i + 1][1].strip()
            under = _ADORNMENT.match(lines[i + 2][1])
            if title and under and under.group(1) == over.group(1) and len(line.rstrip()) >= len(title):
                add((over.group(1), True), title, offset)
                i += 3
                continue
        under = _ADORNMENT.match(lines[i + 1][1])
        title = line.rstrip()
        if under and prev_blank and title and not title[0].isspace() and not _ADORNMENT.match(line):
            if len(lines[i + 1][1].rstrip()) >= len(title):
                add((under.group(1), False), title, offset)
                i += 2
                continue
        i += 1
    return headings
