"""Source code: a section per top-level definition.

Python: the ``ast`` module's top-level functions and classes (decorators included), exact by
construction. Other languages: a line heuristic — an unindented line that starts a
definition (``func``, ``function``, ``def``, ``class``, ``struct``, ``impl``, ``fn``,
``interface``, ``type``, ``enum``, ``trait``, ``module``, ``export ...``, or a C-like
``type name(`` signature) starts a section titled by that line. Comments and blank lines
just above a definition belong to it. Config files (TOML, INI) get their ``[section]`` lines.
"""

from __future__ import annotations

import ast
import re

from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.parsers.text import decode_bytes

_DEF = re.compile(
    r"^(?:(?:export|pub(?:\([a-z]+\))?|public|private|protected|internal|static|async|abstract|final|default|"
    r"unsafe|extern|inline|const|open|override|sealed|data)\s+)*"
    r"(?:func|function|def|class|struct|impl|fn|interface|type|enum|trait|module|object|namespace|"
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|VIEW|FUNCTION|INDEX|PROCEDURE))\b.*",
    re.I,
)
_C_SIGNATURE = re.compile(r"^[A-Za-z_][\w:<>,*& ]*\s+\**[A-Za-z_][\w:]*\s*\([^;]*$")  # int main(int argc, ...
_SHELL_FN = re.compile(r"^[A-Za-z_][\w-]*\s*\(\)\s*\{?")
_INI = re.compile(r"^\[+[^\]]+\]+\s*$")
_TITLE_CHARS = 100


def parse_code(data: bytes, kind: str = "code") -> ParsedDocument:
    """Source text with its top-level definitions as level-1 headings."""
    text = decode_bytes(data)
    headings = _python(text)
    if headings is None:
        headings = _heuristic(text)
    return ParsedDocument(text=text, headings=headings)


def _python(text: str) -> list[Heading] | None:
    """Headings from Python's own parser; None when ``text`` is not Python."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body):
        return None if not text.lstrip().startswith(("import ", "from ", '"""', "#!")) else []
    starts = _line_starts(text)
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            out.append(Heading(1, f"{kind} {node.name}", starts[first - 1]))
    return out


def _line_starts(text: str) -> list[int]:
    starts, offset = [], 0
    for line in text.split("\n"):
        starts.append(offset)
        offset += len(line) + 1
    return starts


def _heuristic(text: str) -> list[Heading]:
    out: list[Heading] = []
    lines = text.split("\n")
    starts = _line_starts(text)
    for i, line in enumerate(lines):
        if not line or line[0].isspace():
            continue
        if _DEF.match(line) or _C_SIGNATURE.match(line) or _SHELL_FN.match(line) or _INI.match(line):
            # Pull the comment block above the definition into its section.
            j = i
            while j > 0 and lines[j - 1].lstrip().startswith(("//", "#", "/*", "*", "--", ";", "@")):
                j -= 1
            title = " ".join(line.rstrip("{ ").split())[:_TITLE_CHARS]
            if not out or starts[j] > out[-1].offset:
                out.append(Heading(1, title, starts[j]))
    return out
