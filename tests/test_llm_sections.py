"""LLM sectioning without a server: numbered lines, windows, and the repair of bad answers."""

from __future__ import annotations

import pytest

from quarry.core.models import Heading, ParsedDocument
from quarry.ingest.llm.sections import (
    Line,
    Proposed,
    Window,
    WindowSections,
    assemble,
    numbered_lines,
    repair_window,
    windows,
)
from quarry.ingest.sectioning import StructureSectioner

TEXT = "\n".join(f"Line {i}: the convoy crossed river {i} with quinoa crates." for i in range(40))


def tiles(sections, n):
    return (
        sections[0].start == 0
        and sections[-1].end == n
        and all(a.end == b.start for a, b in zip(sections, sections[1:]))
    )


def lines_of(text=TEXT):
    return numbered_lines(text)


def test_numbered_lines_skip_blanks_and_split_long_lines():
    text = "first\n\n   \n" + "word " * 120 + "\nlast"
    lines = numbered_lines(text, max_line=100)
    assert text[lines[0].start : lines[0].end] == "first"
    assert text[lines[-1].start : lines[-1].end] == "last"
    assert all(0 < ln.end - ln.start <= 100 for ln in lines)
    assert len(lines) == 2 + 6  # 600 characters of words in lines of at most 100
    assert all(not text[ln.start].isspace() and not text[ln.end - 1].isspace() for ln in lines)


def test_windows_cover_every_line_once_within_budget():
    lines = lines_of()
    wins = windows(lines, 600)
    assert wins[0].lo == 0 and wins[-1].hi == len(lines)
    assert all(a.hi == b.lo for a, b in zip(wins, wins[1:]))
    assert [w.index for w in wins] == list(range(len(wins)))
    for w in wins:
        assert sum(ln.end - ln.start + 8 for ln in lines[w.lo : w.hi]) <= 600 or w.hi - w.lo == 1


W0 = Window(0, 0, 40)
W1 = Window(1, 20, 40)


@pytest.mark.parametrize(
    "answer, window, expected, continues",
    [
        # duplicates: one start given twice is kept once
        (
            {
                "sections": [
                    {"title": "Alpha", "start_line": 0},
                    {"title": "Alpha", "start_line": 0},
                    {"title": "Beta", "start_line": 20},
                ]
            },
            W0,
            [("Alpha", 0), ("Beta", 20)],
            False,
        ),
        # out of range: dropped
        (
            {
                "sections": [
                    {"title": "Alpha", "start_line": 0},
                    {"title": "Nowhere", "start_line": 99999},
                    {"title": "Negative", "start_line": -3},
                ]
            },
            W0,
            [("Alpha", 0)],
            False,
        ),
        # unsorted: sorted
        (
            {"sections": [{"title": "B", "start_line": 25}, {"title": "A", "start_line": 0}]},
            W0,
            [("A", 0), ("B", 25)],
            False,
        ),
        # first section after the first line of the first window: moved up to line 0
        (
            {"sections": [{"title": "A", "start_line": 5}, {"title": "B", "start_line": 30}]},
            W0,
            [("A", 0), ("B", 30)],
            False,
        ),
        # ... of a later window: the window opens inside the previous section
        ({"sections": [{"title": "C", "start_line": 28}]}, W1, [("C", 28)], True),
        # numbered from 0 instead of from the window's first line
        (
            {"sections": [{"title": "C", "start_line": 0}, {"title": "D", "start_line": 10}]},
            W1,
            [("C", 20), ("D", 30)],
            False,
        ),
        # the same title twice in a row is one section
        ({"sections": [{"title": "A", "start_line": 0}, {"title": " a ", "start_line": 10}]}, W0, [("A", 0)], False),
        # strings, floats, junk items and a bare list are tolerated
        (
            [
                {"title": "A", "start_line": "0"},
                {"title": "B", "start_line": 12.0},
                "junk",
                {"title": "C"},
                {"title": "D", "start_line": True},
            ],
            W0,
            [("A", 0), ("B", 12)],
            False,
        ),
        # an empty title stays empty (the assembler gives it the section's opening words)
        ({"sections": [{"title": "", "start_line": 0}]}, W0, [("", 0)], False),
    ],
)
def test_repairs(answer, window, expected, continues):
    repaired = repair_window(answer, window, lines_of())
    assert [(p.title, p.line) for p in repaired.sections] == expected
    assert repaired.continues is continues


@pytest.mark.parametrize(
    "answer",
    [
        {"sections": []},
        {"sections": [{"title": "X", "start_line": 500}]},
        {"title": "no sections key"},
        "not even an object",
        None,
        {"sections": "x"},
    ],
)
def test_unusable_answers_give_none(answer):
    assert repair_window(answer, W0, lines_of()) is None


def test_absurdly_many_tiny_sections_are_collapsed():
    lines = lines_of()
    answer = {"sections": [{"title": f"S{i}", "start_line": i} for i in range(40)]}  # one per line
    repaired = repair_window(answer, W0, lines)
    assert "collapsed tiny sections" in repaired.repairs
    assert 1 < len(repaired.sections) <= 40 * 60 // 300 + 1
    sizes = [lines[b.line].start - lines[a.line].start for a, b in zip(repaired.sections, repaired.sections[1:])]
    assert all(s >= 300 for s in sizes)


def test_reasonable_answers_are_left_alone():
    answer = {
        "sections": [
            {"title": "A", "start_line": 0},
            {"title": "B", "start_line": 15},
            {"title": "C", "start_line": 30},
        ]
    }
    repaired = repair_window(answer, W0, lines_of())
    assert [p.line for p in repaired.sections] == [0, 15, 30] and repaired.repairs == ()


def _assemble(parts, text=TEXT, headings=()):
    doc = ParsedDocument(text=text, headings=list(headings))
    lines = numbered_lines(text)
    return assemble(doc, lines, parts, StructureSectioner(max_section=500).sections(doc)), lines


def test_sections_map_to_character_offsets_and_tile_the_text():
    lines = lines_of()
    parts = [
        (Window(0, 0, 20), WindowSections([Proposed("A", 0), Proposed("B", 10)])),
        (Window(1, 20, 40), WindowSections([Proposed("C", 20), Proposed("D", 33)])),
    ]
    sections, _ = _assemble(parts)
    assert [s.title for s in sections] == ["A", "B", "C", "D"]
    assert [s.start for s in sections] == [0, lines[10].start, lines[20].start, lines[33].start]
    assert tiles(sections, len(TEXT))
    assert TEXT[sections[3].start :].startswith("Line 33:")


@pytest.mark.parametrize(
    "second, titles",
    [
        (WindowSections([Proposed("B", 20), Proposed("C", 30)]), ["A", "B", "C"]),  # a new section at the boundary
        (WindowSections([Proposed("a", 20), Proposed("C", 30)]), ["A", "C"]),  # same title: one section across windows
        (WindowSections([Proposed("C", 30)], continues=True), ["A", "C"]),  # lines 20-29 continue "A"
    ],
)
def test_boundary_merge(second, titles):
    first = WindowSections([Proposed("A", 0)])
    sections, lines = _assemble([(Window(0, 0, 20), first), (Window(1, 20, 40), second)])
    assert [s.title for s in sections] == titles
    assert sections[-1].start == lines[30].start or titles == ["A", "B", "C"]
    assert tiles(sections, len(TEXT))


def test_failed_window_takes_local_sections():
    text = (
        "# Intro\n"
        + "\n".join(f"intro line {i} with enough words to matter." for i in range(15))
        + "\n# Details\n"
        + "\n".join(f"detail line {i} with enough words to matter." for i in range(15))
    )
    headings = [Heading(1, "Intro", 0), Heading(1, "Details", text.index("# Details"))]
    lines = numbered_lines(text)
    cut = next(i for i, ln in enumerate(lines) if text[ln.start :].startswith("detail line 5"))
    parts = [(Window(0, 0, cut), WindowSections([Proposed("Opening words", 0)])), (Window(1, cut, len(lines)), None)]
    sections, _ = _assemble(parts, text, headings)
    # the failed window opens inside the local "Details" section, which the LLM section before it
    # did not know about: the window continues the previous section, no local boundary inside it
    assert [s.title for s in sections] == ["Opening words"]
    parts = [(Window(0, 0, 3), None), (Window(1, 3, len(lines)), WindowSections([Proposed("Rest", 3)]))]
    sections, _ = _assemble(parts, text, headings)
    assert [s.title for s in sections] == ["Intro", "Rest"]
    assert sections[1].path == "Intro > Rest" and sections[1].level == 2  # the LLM title sits under the heading
    assert tiles(sections, len(text))


def test_empty_titles_get_the_opening_words():
    sections, _ = _assemble([(Window(0, 0, 40), WindowSections([Proposed("", 0)]))])
    assert sections[0].title == "Line 0: the convoy crossed river 0 with …"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("...", ""),
        (" - ", ""),
        ("## **Scope**", "Scope"),
        ("word " * 40, ("word " * 40)[:119].rstrip()),  # cut at a word, under MAX_TITLE
    ],
)
def test_placeholder_titles_are_dropped_and_long_ones_cut_at_a_word(raw, expected):
    window = Window(0, 0, 40)
    repaired = repair_window({"sections": [{"title": raw, "start_line": 0}]}, window, lines_of())
    title = repaired.sections[0].title
    assert title == expected and len(title) <= 120 and not title.endswith(" ")


def test_pages_still_resolve_for_llm_sections():
    from quarry.ingest.chunking import chunk_document

    doc = ParsedDocument(text=TEXT, page_offsets=[0, len(TEXT) // 2])
    lines = numbered_lines(TEXT)
    sections = assemble(
        doc,
        lines,
        [(Window(0, 0, 40), WindowSections([Proposed("A", 0), Proposed("B", 25)]))],
        StructureSectioner().sections(doc),
    )
    chunks = chunk_document("d", doc, sections, ["h"] * len(sections), size=400, min_chunk=0)
    assert {c.page_start for c in chunks} == {1, 2}
    assert all(c.section_index == (0 if c.start < sections[1].start else 1) for c in chunks)


def test_line_offsets_are_exact():
    text = "  indented line  \r\nsecond\n"
    lines = numbered_lines(text)
    assert [text[ln.start : ln.end] for ln in lines] == ["indented line", "second"]
    assert isinstance(lines[0], Line)
