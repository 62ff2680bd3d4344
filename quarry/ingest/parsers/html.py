"""HTML: visible text with block structure, h1-h6 as headings, tables as ``a | b`` rows."""

from __future__ import annotations

import re

from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers.text import decode_bytes

# Never visible, or not prose. ix:header holds an inline-XBRL filing's hidden facts.
_SKIP = frozenset("head script style noscript template svg math iframe object canvas select button ix:header".split())
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Separated from their neighbours by a blank line.
_PARAGRAPH = frozenset(
    "address article aside blockquote details dialog div dl fieldset figcaption figure footer form "
    "header hgroup hr main nav ol p pre section summary table ul".split()
)
# Separated by a single line break.
_LINE = frozenset("br caption dd dt li option tr".split())
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_SPACE = re.compile(r"\s+")


def declared_charset(data: bytes) -> str | None:
    """The charset named by a ``<meta>`` tag or XML declaration near the top, if any."""
    head = data[:4096]
    match = _CHARSET.search(head) or _XML_ENCODING.match(head)
    return match.group(1).decode("ascii") if match else None


def parse_html(data: bytes, kind: str = "html") -> ParsedDocument:
    """Parse HTML bytes into visible text, headings and a title (``<title>``, else first h1)."""
    from selectolax.lexbor import LexborHTMLParser

    text = decode_bytes(data, declared_charset(data))
    tree = LexborHTMLParser(text)
    title_node = tree.css_first("title")
    title = _collapse(title_node.text(deep=True)) if title_node is not None else ""
    out = _Writer()
    if tree.root is not None:
        _walk(tree.root, out)
    if not title:
        title = next((h.title for h in out.headings if h.level == 1), "")
    text = "".join(out.parts).rstrip()
    return ParsedDocument(text=text, title=title or None, headings=out.headings)


class _Writer:
    """Accumulates text, collapsing the breaks that block boundaries ask for."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.pending = 0  # newlines owed before the next text
        self.headings: list[Heading] = []

    def brk(self, n: int) -> None:
        self.pending = max(self.pending, n)

    def line_break(self) -> None:
        # <br><br> makes a blank line, but a <br> never adds more than that.
        if self.parts:
            self.pending = min(self.pending + 1, 2)

    def flush(self) -> int:
        """Write the owed breaks (none at the very start); return the offset of the next text."""
        if self.pending and self.parts:
            last = self.parts[-1]
            trimmed = last.rstrip(" ")  # no trailing space before a line break
            self.parts[-1] = trimmed
            self.length -= len(last) - len(trimmed)
            self._append("\n" * self.pending)
        self.pending = 0
        return self.length

    def write(self, text: str, inline: bool = True) -> None:
        if inline:
            text = _SPACE.sub(" ", text)
            if self.pending or not self.parts or self.parts[-1].endswith((" ", "\n")):
                text = text.lstrip(" ")
        if text:
            self.flush()
            self._append(text)

    def _append(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)


def _walk(root, out: _Writer) -> None:
    # Iterative, so deeply nested markup cannot hit the recursion limit; (node, True) marks
    # leaving a block element, where it owes a break before whatever follows.
    stack: list = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        tag = node.tag
        if leaving:
            out.brk(2 if tag in _PARAGRAPH else 1)
            continue
        if tag == "-text":
            out.write(node.text_content or "")
            continue
        if tag.startswith("-") or tag in _SKIP or _hidden(node):
            continue  # comments, doctype, invisible elements
        if tag in _HEADINGS:
            _heading(node, _HEADINGS[tag], out)
        elif tag == "table":
            _table(node, out)
        elif tag == "pre":
            out.brk(2)
            out.write(node.text(deep=True).strip("\n"), inline=False)
            out.brk(2)
        elif tag == "br":
            out.line_break()
        elif tag in _PARAGRAPH or tag in _LINE:
            out.brk(2 if tag in _PARAGRAPH else 1)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(list(node.iter(include_text=True))))
        else:
            stack.extend((child, False) for child in reversed(list(node.iter(include_text=True))))


def _hidden(node) -> bool:
    attrs = node.attributes
    return "hidden" in attrs or bool(_HIDDEN_STYLE.search(attrs.get("style") or ""))


def _heading(node, level: int, out: _Writer) -> None:
    title = _collapse(node.text(deep=True))
    if not title:
        return
    out.brk(2)
    out.headings.append(Heading(level, title, out.flush()))
    out.write(title)
    out.brk(2)


def _table(node, out: _Writer) -> None:
    out.brk(2)
    for row in node.css("tr"):
        if _closest_table(row) != node.mem_id:
            continue  # rows of a nested table are read as part of their cell's text
        cells = [_collapse(c.text(deep=True, separator=" ")) for c in row.iter() if c.tag in ("td", "th")]
        # Empty cells are dropped: in layout tables they are spacers, and text search gains
        # nothing from column alignment.
        cells = [cell for cell in cells if cell]
        if cells:
            out.brk(1)
            out.write(" | ".join(cells), inline=False)
    out.brk(2)


def _closest_table(node):
    parent = node.parent
    while parent is not None and parent.tag != "table":
        parent = parent.parent
    # Wrappers are created afresh on each access, so identity is compared by memory id.
    return parent.mem_id if parent is not None else None


def _collapse(text: str | None) -> str:
    return _SPACE.sub(" ", text or "").strip()
