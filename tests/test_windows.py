"""Context windows on a real DuckDB catalog: ranges, merging, true offsets, document bounds."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from quarry.core.errors import UsageError
from quarry.search.query import SearchResult
from quarry.search.windows import ChunkReader, ChunkSpan, expand, merge_ranges, merge_text, parse_window
from quarry.store import catalog


def make_index(tmp_path, docs: dict[str, tuple[str, list[tuple[int, int]]]], n_chunks: dict[str, int] | None = None):
    """A catalog holding ``docs`` (doc_id -> (text, chunk spans)), wrapped like an Index.

    Each chunk's text is ``text[start:end]``, as the chunker writes it; ``n_chunks`` overrides
    ``documents.n_chunks`` per document.
    """
    con = catalog.create(tmp_path / "catalog.duckdb")
    now = dt.datetime(2024, 1, 1)
    for doc_id, (text, spans) in docs.items():
        n = (n_chunks or {}).get(doc_id, len(spans))
        con.execute(
            "INSERT INTO documents (doc_id, path, root, rel_path, file_type, size, mtime, sha256, title, summary, n_pages, "
            "n_sections, n_chunks, metadata, indexed_at, run_id, path_bytes, principals) "
            "VALUES (?, ?, '/r', ?, 'md', ?, ?, 'sha', ?, '', NULL, 1, ?, '{}', ?, 'run', NULL, ['public'])",
            [doc_id, f"/r/{doc_id}.md", f"{doc_id}.md", len(text), now, f"Title {doc_id}", n, now],
        )
        con.execute("INSERT INTO sections VALUES (?, 0, 'Intro', 1, 0, ?, NULL, NULL, NULL)", [doc_id, len(text)])
        for i, (a, b) in enumerate(spans):
            con.execute(
                "INSERT INTO chunks (chunk_id, doc_id, section_index, chunk_index, start_char, end_char, page_start, "
                "page_end, header, text, text_hash, n_tokens, search_text) VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, ?, 'h', 1, '')",
                [f"{doc_id}:{i}", doc_id, i, a, b, i // 2 + 1, i // 2 + 1, f"Header {doc_id}", text[a:b]],
            )
    return SimpleNamespace(chunk_reader=lambda: ChunkReader(con))


def hit(chunk_id: str, rank: int, score: float | None = None, carry_index: bool = True) -> SearchResult:
    """A search result for ``chunk_id``; ``carry_index=False`` leaves ``chunk_index`` unset (0), as
    a result built by hand might, so the catalog has to be asked where the chunk is."""
    doc_id, index = chunk_id.split(":")
    return SearchResult(
        rank=rank,
        score=score if score is not None else 1.0 / rank,
        chunk_id=chunk_id,
        doc_id=doc_id,
        path=f"/r/{doc_id}.md",
        title="",
        section="",
        header="",
        text="",
        page_start=None,
        page_end=None,
        chunk_index=int(index) if carry_index else 0,
    )


TEXT = "".join(f"Sentence number {i:02d} of the text. " for i in range(20))
SENTENCE = len(TEXT) // 20  # characters per sentence


def tiled(n: int, size: int = 60, overlap: int = 0) -> list[tuple[int, int]]:
    return [(max(0, i * size - overlap), (i + 1) * size) for i in range(n)]


@pytest.mark.parametrize(
    "spec, expected",
    [("1,1", (1, 1)), ("0,2", (0, 2)), (" 3 , 0 ", (3, 0)), ("2", (2, 2))],
)
def test_parse_window(spec, expected):
    assert parse_window(spec) == expected


@pytest.mark.parametrize("spec", ["", "a,b", "1,2,3", "-1,1", "1;1"])
def test_parse_window_rejects(spec):
    with pytest.raises(UsageError, match="--window takes BEFORE,AFTER"):
        parse_window(spec)


@pytest.mark.parametrize(
    "ranges, merged",
    [
        ([(0, 2), (3, 5)], [(0, 5)]),  # touching
        ([(0, 2), (4, 5)], [(0, 2), (4, 5)]),  # a gap of one chunk stays a gap
        ([(4, 6), (0, 5)], [(0, 6)]),  # overlapping, out of order
        ([(1, 1)], [(1, 1)]),
    ],
)
def test_merge_ranges(ranges, merged):
    assert merge_ranges(ranges) == merged


@pytest.mark.parametrize("overlap", [0, 7, 25])
def test_merge_text_uses_offsets_so_overlap_is_not_repeated(overlap):
    spans = tiled(10, overlap=overlap)
    chunks = [ChunkSpan(i, a, b, TEXT[a:b]) for i, (a, b) in enumerate(spans)]
    assert merge_text(chunks[2:6]) == TEXT[spans[2][0] : spans[5][1]]


def test_merge_text_marks_a_gap():
    chunks = [ChunkSpan(0, 0, 10, TEXT[0:10]), ChunkSpan(1, 12, 20, TEXT[12:20])]
    assert merge_text(chunks) == TEXT[0:10] + "\n\n" + TEXT[12:20]


@pytest.mark.parametrize("carry_index", [True, False])
def test_expand_merges_touching_hits_and_keeps_others_apart(tmp_path, carry_index):
    idx = make_index(tmp_path, {"a": (TEXT, tiled(10)), "b": (TEXT, tiled(4))})
    results = [hit(c, r, carry_index=carry_index) for c, r in (("a:2", 1), ("b:0", 2), ("a:4", 3), ("a:9", 4))]
    windows = expand(idx, results, before=1, after=1)
    got = [(w.doc_id, w.first_chunk, w.last_chunk, w.hits) for w in windows]
    # a:2 -> 1..3 and a:4 -> 3..5 overlap; a:9 -> 8..9 is clipped at the last chunk
    assert got == [("a", 1, 5, [1, 3]), ("b", 0, 1, [2]), ("a", 8, 9, [4])]
    assert [w.rank for w in windows] == [1, 2, 3]
    first = windows[0]
    assert first.text == TEXT[60:360]
    assert (first.start_char, first.end_char) == (60, 360)
    assert first.chunk_ids == [f"a:{i}" for i in range(1, 6)]
    assert first.score == 1.0 and first.path == "/r/a.md" and first.title == "Title a"
    assert first.section == "Intro" and first.header == "Header a"
    assert (first.page_start, first.page_end) == (1, 3)


def test_expand_with_overlapping_chunks_never_duplicates_text(tmp_path):
    idx = make_index(tmp_path, {"a": (TEXT, tiled(10, overlap=20))})
    spans = tiled(10, overlap=20)
    (window,) = expand(idx, [hit("a:5", 1)], before=2, after=2)
    assert window.text == TEXT[spans[3][0] : spans[7][1]]
    numbers = [f"number {i:02d} " for i in range(spans[3][0] // SENTENCE + 1, spans[7][1] // SENTENCE)]
    assert numbers and all(window.text.count(n) == 1 for n in numbers)  # overlaps are not repeated


def test_expand_respects_the_documents_true_chunk_count(tmp_path):
    # n_chunks says 3 although more rows exist (e.g. a catalog mid-repair): the window stops at chunk 2.
    idx = make_index(tmp_path, {"a": (TEXT, tiled(6))}, n_chunks={"a": 3})
    for carry_index in (True, False):
        (window,) = expand(idx, [hit("a:1", 1, carry_index=carry_index)], before=0, after=5)
        assert (window.first_chunk, window.last_chunk) == (1, 2)


def test_expand_zero_margin_is_the_hits_themselves(tmp_path):
    idx = make_index(tmp_path, {"a": (TEXT, tiled(10))})
    windows = expand(idx, [hit("a:3", 1), hit("a:4", 2)], before=0, after=0)
    # adjacent hits touch, so they still merge into one window
    assert [(w.first_chunk, w.last_chunk, w.hits) for w in windows] == [(3, 4, [1, 2])]


def test_expand_skips_unknown_chunks_and_empty_input(tmp_path):
    idx = make_index(tmp_path, {"a": (TEXT, tiled(3))})
    assert expand(idx, [], 1, 1) == []
    assert expand(idx, [hit("zz:1", 1)], 1, 1) == []
    with pytest.raises(UsageError):
        expand(idx, [hit("a:1", 1)], -1, 0)
