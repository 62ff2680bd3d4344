"""The semantic sectioner: cuts at topic shifts, sizes respected, headings kept, extractive titles."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared

from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.sectioning import (
    SemanticSectioner,
    StructureSectioner,
    extractive_title,
    semantic_cuts,
    sentence_groups,
)

TOPICS = {"cat": 0, "rocket": 1, "bread": 2}


class TopicEmbedder:
    """One axis per topic word, so that the true boundaries are known; counts its calls."""

    def __init__(self):
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        out = np.full((len(texts), len(TOPICS) + 1), 0.01, dtype=np.float32)
        for i, text in enumerate(texts):
            for word, axis in TOPICS.items():
                out[i, axis] += text.lower().count(word)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def paragraph(topic: str, n: int) -> str:
    return " ".join(f"The {topic} sentence number {i} says a little more about the {topic}." for i in range(n))


def tiles(sections, n):
    return (
        sections[0].start == 0
        and sections[-1].end == n
        and all(a.end == b.start for a, b in zip(sections, sections[1:]))
    )


def test_unstructured_text_is_cut_at_the_topic_shifts():
    parts = [paragraph("cat", 25), paragraph("rocket", 25), paragraph("bread", 25)]
    text = "\n\n".join(parts)
    sectioner = SemanticSectioner(TopicEmbedder().embed, max_section=2500, min_section=300)
    sections = sectioner.sections(ParsedDocument(text=text))
    assert tiles(sections, len(text))
    starts = [s.start for s in sections]
    shifts = [text.index(paragraph("rocket", 1)[:20]), text.index(paragraph("bread", 1)[:20])]
    for shift in shifts:
        assert any(abs(shift - s) <= 2 for s in starts), (shift, starts)  # each shift is a cut
    assert all(s.end - s.start >= 300 for s in sections)
    assert sections[0].title.startswith("The cat sentence number 0")
    assert any(s.title.startswith("The rocket sentence") for s in sections)


@pytest.mark.parametrize("max_section, min_section", [(1500, 200), (3000, 600), (6000, 1000)])
def test_sizes_stay_within_bounds(max_section, min_section):
    text = "\n\n".join(paragraph(t, 20) for t in ("cat", "rocket", "bread", "cat"))
    sections = SemanticSectioner(TopicEmbedder().embed, max_section=max_section, min_section=min_section).sections(
        ParsedDocument(text=text)
    )
    assert tiles(sections, len(text))
    sizes = [s.end - s.start for s in sections]
    assert min(sizes) >= min_section
    assert max(sizes) <= max_section + 300  # a piece can only end between sentence groups


def test_headings_are_kept_and_only_long_sections_are_split():
    long_body = "\n\n".join([paragraph("cat", 30), paragraph("rocket", 30)])
    text = "# Guide\n\nShort intro about bread.\n\n## Animals and machines\n\n" + long_body + "\n\n## End\n\nBye.\n"
    headings = [
        Heading(1, "Guide", 0),
        Heading(2, "Animals and machines", text.index("## Animals")),
        Heading(2, "End", text.index("## End")),
    ]
    doc = ParsedDocument(text=text, headings=headings)
    embedder = TopicEmbedder()
    sections = SemanticSectioner(embedder.embed, max_section=2000, min_section=300).sections(doc)
    assert tiles(sections, len(text))
    titles = [s.title for s in sections]
    assert titles[0] == "Guide" and titles[1] == "Animals and machines" and titles[-1] == "End"
    pieces = sections[2:-1]
    assert pieces and all(p.path.startswith("Guide > Animals and machines > ") and p.level == 3 for p in pieces)
    assert [s.index for s in sections] == list(range(len(sections)))


def test_short_documents_are_sectioned_like_structure_without_embedding():
    embedder = TopicEmbedder()
    text = "# A\n\nSome text.\n\n# B\n\nMore text.\n"
    doc = ParsedDocument(text=text, headings=[Heading(1, "A", 0), Heading(1, "B", text.index("# B"))])
    assert SemanticSectioner(embedder.embed).sections(doc) == StructureSectioner().sections(doc)
    assert embedder.calls == 0


def test_sentence_groups_tile_and_end_at_paragraphs():
    text = "One. Two three. Four!\n\nFive six. " * 30
    groups = sentence_groups(text, 0, len(text), size=100)
    assert groups[0][0] == 0 and groups[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))
    assert all(text[:b].endswith(("\n\n", " ")) for _, b in groups[:-1])


def test_semantic_cuts_pick_the_largest_distance_and_respect_minimum():
    distances = np.array([0.1, 0.9, 0.1, 0.1, 0.8, 0.1], dtype=np.float32)
    sizes = [100] * 7
    assert semantic_cuts(distances, sizes, min_size=200, max_size=10_000, threshold=0.5) == [2, 5]
    # no boundary leaves 300 on both sides except weak ones (3, 4)
    assert semantic_cuts(distances, sizes, min_size=300, max_size=10_000, threshold=0.5) == []
    assert semantic_cuts(distances, sizes, min_size=100, max_size=10_000, threshold=0.95) == []
    # too long: cut even below the threshold, at the best place
    assert semantic_cuts(distances, sizes, min_size=100, max_size=400, threshold=0.95)[0] == 2


@pytest.mark.parametrize(
    "text, title",
    [
        ("Installation notes\nRun the installer.", "Installation notes"),
        (
            "The zebra convoy crossed the river at dawn, carrying many crates. Then more.",
            "The zebra convoy crossed the river at dawn, …",
        ),
        ("", ""),
    ],
)
def test_extractive_title(text, title):
    assert extractive_title(text) == title


@pytest.mark.slow
def test_real_model_on_a_real_long_text():
    """The real embedder (the one the index uses) on a real unstructured text."""
    from quarry.core.settings import Settings
    from quarry.ingest.embedders import get_embedder
    from quarry.ingest.parsers import parse_file

    doc = parse_file(str(shared("formats", "book-war-and-peace-1p.txt")))
    embedder = get_embedder(Settings.from_env(embed_backend="onnx-int8"))
    sections = SemanticSectioner(embedder.embed, max_section=1500, min_section=300).sections(doc)
    assert tiles(sections, len(doc.text)) and len(sections) >= 2
    assert all(s.title for s in sections) and all(s.end - s.start >= 300 for s in sections)
