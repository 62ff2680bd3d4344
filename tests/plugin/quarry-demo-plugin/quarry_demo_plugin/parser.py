"""Parse a `.demo` file: UTF-8 text, a heading at each line that starts with '== '."""

from quarry.core.models import Heading, ParsedDocument


def parse_demo(data: bytes, kind: str) -> ParsedDocument:
    text = data.decode("utf-8")
    headings, offset = [], 0
    for line in text.splitlines(keepends=True):
        if line.startswith("== "):
            headings.append(Heading(level=1, title=line[3:].strip(), offset=offset))
        offset += len(line)
    return ParsedDocument(
        text=text,
        title=headings[0].title if headings else "",
        headings=headings,
        metadata={"parsed_by": "quarry-demo-plugin"},
    )
