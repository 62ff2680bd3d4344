import pytest

from quarry.core.models import ParsedDocument, Section
from quarry.ingest.chunking import chunk_document, split_spans

PARA = "The quick brown fox jumps over the lazy dog. " * 4


def _doc(text):
    return ParsedDocument(text=text)


@pytest.mark.parametrize("size", [100, 200, 400])
def test_spans_respect_size_and_cover_text(size):
    text = "\n\n".join(PARA.strip() for _ in range(8))
    spans = split_spans(text, 0, len(text), size)
    assert all(b - a <= size for a, b in spans)
    # Every non-space character is in exactly one span, in order.
    covered = "".join(text[a:b] for a, b in spans)
    assert covered.replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
    assert spans == sorted(spans)


def test_prefers_paragraph_breaks():
    text = "First paragraph here.\n\nSecond paragraph is a little longer than the first."
    spans = split_spans(text, 0, len(text), 60)
    assert [text[a:b] for a, b in spans] == [
        "First paragraph here.",
        "Second paragraph is a little longer than the first.",
    ]


def test_hard_cut_inside_a_giant_word():
    text = "x" * 250
    assert split_spans(text, 0, 250, 100) == [(0, 100), (100, 200), (200, 250)]


def test_short_tail_merges_into_neighbour():
    text = "A" * 95 + "\n\n" + "tail text."  # 107 characters: over the size of 100
    assert split_spans(text, 0, len(text), 100, min_chunk=20) == [(0, len(text))]
    assert len(split_spans(text, 0, len(text), 100, min_chunk=0)) == 2


def test_chunks_keep_offsets_pages_and_headers():
    text = "Page one text. " * 20 + "\n\n" + "Page two text. " * 20
    doc = ParsedDocument(text=text, page_offsets=[0, text.index("Page two")])
    sections = [Section(index=0, title="S", level=1, start=0, end=len(text))]
    chunks = chunk_document("d1", doc, sections, ["Document: T"], size=200, min_chunk=0)
    for i, c in enumerate(chunks):
        assert c.text == text[c.start : c.end]
        assert c.chunk_index == i and c.chunk_id == f"d1:{i}"
        assert c.header == "Document: T"
        assert c.embed_text.startswith("Document: T\n\n")
    assert chunks[0].page_start == 1 and chunks[-1].page_end == 2


def test_overlap_starts_early_on_a_word_boundary():
    text = " ".join(f"word{i}" for i in range(200))
    sections = [Section(index=0, title="", level=0, start=0, end=len(text))]
    chunks = chunk_document("d", _doc(text), sections, [""], size=200, overlap=50, min_chunk=0)
    for prev, cur in zip(chunks, chunks[1:]):
        assert cur.start < prev.end  # overlaps
        assert text[cur.start - 1] == " "  # starts at a word


def test_token_budget_resplits_chunks():
    text = " ".join(["tok"] * 300)
    sections = [Section(index=0, title="", level=0, start=0, end=len(text))]

    def count(texts):  # one token per word, plus the two special tokens
        return [len(t.split()) + 2 for t in texts]

    chunks = chunk_document(
        "d", _doc(text), sections, ["Header words here"], size=2000, count_tokens=count, max_tokens=64
    )
    assert len(chunks) > 1
    assert all(c.n_tokens <= 64 and not c.truncated for c in chunks)


def test_header_too_long_is_flagged_truncated():
    sections = [Section(index=0, title="", level=0, start=0, end=10)]
    chunks = chunk_document(
        "d", _doc("short text"), sections, ["h " * 100], count_tokens=lambda ts: [999] * len(ts), max_tokens=64
    )
    assert chunks and all(c.truncated for c in chunks)


def test_markup_is_left_out_of_the_embedded_text_only():
    from quarry.core.models import text_hash, without_markup

    assert without_markup('see [the guide](https://x.example/a_(b) "Guide") now') == "see the guide now"
    assert without_markup("![logo](img/logo.png) [top](#top) [mail](mailto:a@b.c)") == "logo top mail"
    # not links: an index then a call, a bracket with a word in parentheses, code without "]("
    for code in ("f[i](x)", "[note](draft)", "a[0] (b)", "x = [1, 2](3)"):
        assert without_markup(code) == code
    # a table keeps its rows, not its delimiter row; inline HTML keeps its text, not its tags
    assert without_markup("| Plan | Seats |\n| --- | :---: |\n| Pro | 10 |") == "| Plan | Seats |\n| Pro | 10 |"
    html = '<p align="center"><img src="logo.png" width="80"/></p><details><summary>More</summary>Hi<br>there</details>'
    assert without_markup(html).split() == ["More", "Hi", "there"]
    assert without_markup("<!-- TODO: link -->Done").split() == ["Done"]
    for code in ("List<String> names", "a < b and c > d", "<T> T first(List<T> xs)", "x -- y --- z"):
        assert without_markup(code) == code
    text = "Deploys roll back with [the runbook](https://wiki.example/ops/rollback-runbook.md).\n\n" + PARA
    sections = [Section(index=0, title="", level=0, start=0, end=len(text))]
    (chunk,) = chunk_document("d", _doc(text), sections, ["Document: [Ops](ops/index.md)"], size=800, min_chunk=0)
    assert "https://wiki.example/ops/rollback-runbook.md" in chunk.text  # stored and BM25 text keep it
    assert chunk.embed_text.startswith("Document: Ops\n\nDeploys roll back with the runbook.\n\n")
    assert chunk.text_hash == text_hash(chunk.embed_text)


def test_markdown_syntax_marks_are_left_out_of_the_embedded_text():
    from quarry.core.models import join_header, without_markup

    text = "## Setup\n\n> Note: **never** push to *main*.\n\n- run `make test`\n  * then __deploy__\n\n* * *\nDone"
    assert without_markup(text).split() == "Setup Note: never push to main. run make test then deploy Done".split()
    assert without_markup("```python\nprint(1)\n```").split() == ["python", "print(1)"]
    for rule in ("- - -", "___", "* * *"):  # thematic breaks, not bullets
        assert without_markup(f"a\n{rule}\nb").split() == ["a", "b"]
    # not emphasis: marks that do not pair up around words, inside words, or as operators
    for code in (
        "snake_case my_var",
        "a * b * c",
        "2*3*4",
        "f(*args, **kwargs)",
        "*.md and *.txt",
        "#channel",
        "x_{i}_{j}",
    ):
        assert without_markup(code) == code
    assert without_markup("1. first\n2. second") == "1. first\n2. second"  # numbers say the order
    header = "Document: Ops guide\nSection: Deploys > Rollback"  # headers keep their labels
    assert join_header(header, "## Roll back\n\n**Now**.") == f"{header}\n\nRoll back\n\nNow."


def test_a_markdown_link_target_is_found_by_bm25_but_not_embedded(tmp_path, run_flow):
    import quarry
    from quarry.core.models import join_header
    from quarry.ingest.embedders.minilm import TokenCounter, bundled_model_path

    root = tmp_path / "docs"
    root.mkdir()
    link = "https://wiki.example/ops/kubernetes-rollback-runbook.md"
    (root / "ops.md").write_text(f"# Ops\n\nWhen a deploy fails, follow [the rollback steps]({link}).\n")
    (root / "other.md").write_text("# Other\n\nLunch is served at noon in the atrium.\n")
    run_flow([root], tmp_path / "db")
    with quarry.open(tmp_path / "db") as idx:
        hits = idx.search("kubernetes rollback runbook", k=5, mode="bm25").results
        assert hits and hits[0].path.endswith("ops.md") and link in hits[0].text
        n_tokens, header, text = idx.snapshot.con.execute(
            "SELECT c.n_tokens, c.header, c.text FROM chunks c JOIN documents d USING (doc_id) WHERE d.path LIKE '%ops.md'"
        ).fetchone()
    assert link in text
    count = TokenCounter()
    count.model_path = bundled_model_path()
    embedded, whole = count.count_tokens([join_header(header, text), f"{header}\n\n{text}"])
    assert n_tokens <= embedded < whole - 10  # the URL's word pieces were not embedded
