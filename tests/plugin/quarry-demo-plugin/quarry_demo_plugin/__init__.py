"""quarry-demo-plugin: a `.demo` format whose sections start at lines '== Title'."""

from quarry.ingest.parsers import Format

DEMO_FORMAT = Format(
    "demo",
    (".demo",),
    "quarry_demo_plugin.parser:parse_demo",
    "quarry-demo-plugin",
    structure="a section per '== Title' line",
)
