import pytest
from conftest import shared

from quarry.core.models import FileInfo, Heading, ParsedDocument
from quarry.ingest.context import RuleContextWriter, extractive_summary, title_from_filename
from quarry.ingest.parsers import parse_file
from quarry.ingest.sectioning import StructureSectioner


def tiles(sections, n):
    return (
        sections[0].start == 0
        and sections[-1].end == n
        and all(a.end == b.start for a, b in zip(sections, sections[1:]))
    )


def test_headings_become_sections_with_breadcrumbs():
    text = "# Guide\n## Setup\nInstall it.\n### Linux\nUse apt.\n## Usage\nRun it.\n"
    heads = [Heading(1, "Guide", 0), Heading(2, "Setup", 8), Heading(3, "Linux", 29), Heading(2, "Usage", 47)]
    sections = StructureSectioner().sections(ParsedDocument(text=text, headings=heads))
    assert [(s.title, s.path) for s in sections] == [
        ("Setup", "Guide > Setup"),
        ("Linux", "Guide > Setup > Linux"),
        ("Usage", "Guide > Usage"),
    ]
    assert tiles(sections, len(text))  # the empty "Guide" section folded into "Setup"


def test_unstructured_text_is_sectioned_by_size():
    text = "\n\n".join(f"Paragraph {i} " + "words " * 60 for i in range(30))
    sections = StructureSectioner(max_section=1000).sections(ParsedDocument(text=text))
    assert len(sections) > 5 and tiles(sections, len(text))
    assert all(s.end - s.start <= 1000 for s in sections)


def test_real_handbook_markdown():
    root = shared("trees", "sourcegraph-handbook", "content")
    files = sorted(root.rglob("*.md"), key=lambda p: -p.stat().st_size)[:20]
    for path in files:
        doc = parse_file(str(path))
        sections = StructureSectioner().sections(doc)
        assert tiles(sections, len(doc.text)), path
        titled = [s for s in sections if s.title]
        assert len(titled) >= min(3, len(doc.headings) // 2), path


@pytest.mark.parametrize("name, title", [("release-notes_2024.md", "Release notes 2024"), ("README.md", "README")])
def test_title_from_filename(name, title):
    assert title_from_filename(name) == title


def test_header_skips_repeated_document_title():
    from quarry.core.models import Section

    writer = RuleContextWriter()
    doc = ParsedDocument(
        text="# Guide\n\nSome opening prose that is long enough to be a summary sentence here.",
        headings=[Heading(1, "Guide", 0)],
    )
    file = FileInfo("/r/guide.md", "/r", "guide.md", "md", 1, 1.0, "x")
    title, summary = writer.document_context(doc, file, [])
    assert title == "Guide" and summary.startswith("Some opening prose")
    assert (
        writer.header(title, summary, Section(0, "Setup", 2, 0, 1, path="Guide > Setup"))
        == "Document: Guide\nSection: Setup"
    )
    assert writer.header(title, summary, Section(0, "Guide", 1, 0, 1, path="Guide")) == "Document: Guide"


def test_extractive_summary_skips_headings_and_short_lines():
    text = "# Title\n\n[link](x)\n\nThe first real paragraph says what this is about. It has two sentences."
    assert extractive_summary(text) == "The first real paragraph says what this is about. It has two sentences."
