"""Structured text: JSON, NDJSON, YAML, XML, Jupyter notebooks, and Org / AsciiDoc markup.

Data is written as one ``key.path: value`` line per scalar (``user.address.city: Paris``;
list items as ``items[0].name``), so a search for a value also sees what it means. NDJSON
records and YAML documents are sections; top-level keys of a large object are sections too.
"""

from __future__ import annotations

import json
import re

from quarry.core.errors import ParseError
from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers.text import decode_bytes

MAX_LINES = 200_000  # scalars written per file; the rest is said to be dropped
MAX_VALUE_CHARS = 2_000
SECTION_KEYS_ABOVE = 1_500  # an object's text longer than this gets a section per top-level key


def parse_data(data: bytes, kind: str = "json") -> ParsedDocument:
    """Parse ``json``, ``ndjson``, ``yaml`` or ``xml`` bytes into key-path lines."""
    text = decode_bytes(data)
    if kind == "xml":
        return _xml(data)
    if kind == "ndjson":
        records = []
        for n, line in enumerate(text.split("\n"), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as exc:
                    raise ParseError(f"invalid NDJSON at line {n}: {exc}") from exc
        return _records(records, "Record")
    if kind == "yaml":
        import yaml

        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise ParseError(f"invalid YAML: {' '.join(str(exc).split())[:160]}") from exc
        return _records(docs, "Document") if len(docs) > 1 else _value(docs[0] if docs else None)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"invalid JSON: {exc}") from exc
    return _value(value)


def key_lines(value, prefix: str = "", out: list[str] | None = None) -> list[str]:
    """``path: value`` lines for every scalar under ``value`` (iterative: no recursion limit)."""
    out = [] if out is None else out
    stack = [(prefix, value)]
    while stack and len(out) < MAX_LINES:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend(reversed([(f"{path}.{k}" if path else str(k), v) for k, v in node.items()]))
        elif isinstance(node, list):
            if node and all(not isinstance(v, (dict, list)) for v in node):
                out.append(f"{path}: {', '.join(_scalar(v) for v in node)}")  # a list of words reads as one line
            else:
                stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(node)]))
        else:
            out.append(f"{path}: {_scalar(node)}" if path else _scalar(node))
    return out


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return " ".join(str(value).split())[:MAX_VALUE_CHARS]


def _value(value) -> ParsedDocument:
    """One object: a section per top-level key when the text is long, else one block."""
    if isinstance(value, dict) and value:
        blocks = [(str(k), "\n".join(key_lines(v, str(k)))) for k, v in value.items()]
        if sum(len(b) for _, b in blocks) > SECTION_KEYS_ABOVE:
            return _join(blocks)
    return ParsedDocument(text="\n".join(key_lines(value)))


def _records(records: list, label: str) -> ParsedDocument:
    return _join([(f"{label} {i}", "\n".join(key_lines(r))) for i, r in enumerate(records, 1)], titled=True)


def _join(blocks: list[tuple[str, str]], titled: bool = False) -> ParsedDocument:
    parts: list[str] = []
    headings: list[Heading] = []
    length = 0
    for title, body in blocks:
        if not body.strip():
            continue
        if parts:
            parts.append("\n\n")
            length += 2
        headings.append(Heading(1, title, length))
        piece = f"{title}\n{body}" if titled else body
        parts.append(piece)
        length += len(piece)
    return ParsedDocument(text="".join(parts), headings=headings)


def _xml(data: bytes) -> ParsedDocument:
    """Element paths with their text and attributes: ``catalog.book.title: Dune``."""
    from lxml import etree

    # No network, no entity expansion: an XML bomb or an external entity is refused, not fetched.
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, recover=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise ParseError(f"invalid XML: {exc}") from exc
    lines: list[str] = []
    stack = [(root, "")]
    while stack and len(lines) < MAX_LINES:
        node, parent = stack.pop()
        if not isinstance(node.tag, str):
            continue  # comments, processing instructions
        name = etree.QName(node).localname
        path = f"{parent}.{name}" if parent else name
        for key, value in node.attrib.items():
            lines.append(f"{path}@{etree.QName(key).localname}: {_scalar(value)}")
        text = " ".join((node.text or "").split())
        if text:
            lines.append(f"{path}: {text[:MAX_VALUE_CHARS]}")
        stack.extend((child, path) for child in reversed(node))
        tail = " ".join((node.tail or "").split())
        if tail and parent:
            lines.append(f"{parent}: {tail[:MAX_VALUE_CHARS]}")
    return ParsedDocument(text="\n".join(lines))


def parse_notebook(data: bytes, kind: str = "ipynb") -> ParsedDocument:
    """A Jupyter notebook: a section per cell; Markdown cells keep their own headings."""
    from quarry.ingest.parsers.text import markdown_headings

    try:
        nb = json.loads(decode_bytes(data))
        if "cells" not in nb and "worksheets" not in nb:
            raise KeyError("no cells")
        cells = nb["cells"] if "cells" in nb else [c for ws in nb.get("worksheets", []) for c in ws["cells"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"invalid notebook: {type(exc).__name__}: {exc}") from exc
    parts: list[str] = []
    headings: list[Heading] = []
    length = 0
    for n, cell in enumerate(cells, 1):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if not source.strip():
            continue
        if parts:
            parts.append("\n\n")
            length += 2
        kind_ = cell.get("cell_type", "code")
        own = markdown_headings(source) if kind_ == "markdown" else []
        if own and own[0].offset == 0:
            headings.extend(Heading(h.level, h.title, length + h.offset) for h in own)
            piece = source
        else:
            headings.append(Heading(1, f"Cell {n} ({kind_})", length))
            headings.extend(Heading(h.level + 1, h.title, length + len(f"Cell {n}\n") + h.offset) for h in own)
            piece = f"Cell {n}\n{source}"
        parts.append(piece)
        length += len(piece)
    title = next((h.title for h in headings if not h.title.startswith("Cell ")), None)
    return ParsedDocument(text="".join(parts), title=title, headings=headings)


_ORG = re.compile(r"^(\*+)\s+(.*?)\s*$")
_ADOC = re.compile(r"^(={1,6}|#{1,6})\s+(\S.*?)\s*$")
_ADOC_FENCE = re.compile(r"^(-{4,}|\.{4,}|={4,}|\+{4,}|_{4,}|\*{4,}|/{4,})\s*$")
_ORG_TITLE = re.compile(r"^#\+title:\s*(.+)$", re.I | re.M)


def parse_markup(data: bytes, kind: str = "org") -> ParsedDocument:
    """Org (``* Heading``, ``** Sub``) or AsciiDoc (``= Title``, ``== Section``) headings; code blocks skipped."""
    text = decode_bytes(data)
    headings: list[Heading] = []
    offset, fence = 0, ""
    for line in text.split("\n"):
        if kind == "org":
            low = line.strip().lower()
            if low.startswith("#+begin_"):
                fence = "#+end_"
            elif fence and low.startswith(fence):
                fence = ""
            elif not fence and (m := _ORG.match(line)):
                title = re.sub(r"^(TODO|DONE)\s+", "", m.group(2))
                title = re.sub(r"\s+:[\w:@]+:$", "", title)  # trailing :tags:
                if title:
                    headings.append(Heading(len(m.group(1)), title, offset))
        else:
            if _ADOC_FENCE.match(line):
                fence = "" if fence == line.strip() else (fence or line.strip())
            elif not fence and (m := _ADOC.match(line)):
                headings.append(Heading(len(m.group(1)), m.group(2), offset))
        offset += len(line) + 1
    title_match = _ORG_TITLE.search(text) if kind == "org" else None
    doc_title = title_match.group(1).strip() if title_match else next((h.title for h in headings if h.level == 1), None)
    return ParsedDocument(text=text, title=doc_title, headings=headings)
