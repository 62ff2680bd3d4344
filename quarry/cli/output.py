"""Rendering search output: a rich table for people; JSON and JSON Lines for programs come from
the library's one serialiser (:mod:`quarry.search.serialize`, which the HTTP API and MCP use too).
"""

from __future__ import annotations

from collections.abc import Sequence

from quarry.core.models import RETRIEVERS
from quarry.core.paths import printable  # a newline or tab in a file name must not break a table row

FORMATS = ("table", "json", "jsonl")
SNIPPET = 300  # characters of a result's text in the table
BLOCK = 2000  # characters of a window's or segment's text in the table
# under the table when the answer is weak (quarry/search/relevance.py); the web page says the same
WEAK_LINE = "no strong match: no result holds most of the query's words or is close to it in meaning"


# --- people ----------------------------------------------------------------------------------


def _pages(start, end) -> str:
    if not start:
        return ""
    return f" p.{start}" + (f"-{end}" if end and end != start else "")


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _num(value, fmt: str = "{:.4f}") -> str:
    return "-" if value is None else fmt.format(value)


def _console():
    import os
    import sys

    from rich.console import Console

    # Piped output has no terminal width; rich would assume 80 columns and fold every cell.
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    return Console(highlight=False, soft_wrap=False, width=width)


def print_results(response, explained: bool = False, console=None, copies: bool = False) -> None:
    """The results as a table: rank, score, where (with "+N copies", their paths with ``copies``),
    snippet (plus retriever columns with ``explained``)."""
    from rich.table import Table

    console = console or _console()
    if not response.results:
        console.print("no results")
        return
    reranked = any("rerank" in r.scores for r in response.results)
    table = Table(show_lines=True, expand=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    if explained:
        for name in RETRIEVERS:
            table.add_column(f"{name} rank", justify="right")
            table.add_column(f"{name} score", justify="right")
        table.add_column("fused", justify="right")
        if reranked:
            table.add_column("rerank", justify="right")
    table.add_column("where", overflow="fold", ratio=2)
    table.add_column("text", overflow="fold", ratio=3)
    for r in response.results:
        where = f"{printable(r.path)}{_pages(r.page_start, r.page_end)}" + (f"\n§ {r.section}" if r.section else "")
        held = getattr(r, "copies", None) or []
        if held:
            total = max(getattr(r, "copies_total", 0) or 0, len(held))
            where += f"\n+{total} cop{'y' if total == 1 else 'ies'}"
            if copies:
                where += "".join(f"\n  {printable(c['path'])}" for c in held)
                if total > len(held):
                    where += f"\n  ... {total - len(held)} more"
        row = [str(r.rank), f"{r.score:.4f}"]
        if explained:
            for name in RETRIEVERS:
                row += [_num(r.ranks.get(name), "{}"), _num(r.scores.get(name))]
            row.append(_num(getattr(r, "fused", None)))
            if reranked:
                row.append(_num(r.scores.get("rerank")))
        row += [where, _short(r.text, SNIPPET // 2 if explained else SNIPPET)]
        table.add_row(*row)
    console.print(table)
    if getattr(response, "filter", ""):
        console.print(f"filter: {response.filter}")


def print_blocks(items: Sequence, kind: str, console=None) -> None:
    """Windows or segments: a heading line with where and which hits, then the text."""
    from rich.text import Text

    console = console or _console()
    if not items:
        console.print(f"no {kind}s")
        return
    for it in items:
        chunks = (
            f"chunks {it.first_chunk}-{it.last_chunk}" if it.last_chunk != it.first_chunk else f"chunk {it.first_chunk}"
        )
        hits = ", ".join(f"#{h}" for h in it.hits) or "none"
        head = Text(
            f"{it.rank:>2}. {printable(it.path)}{_pages(it.page_start, it.page_end)}"
            + (f" § {it.section}" if it.section else "")
            + f"  [{chunks}; hits {hits}; score {it.score:.4f}]",
            style="bold",
        )
        console.print(head)
        body = it.text if len(it.text) <= BLOCK else it.text[: BLOCK - 1] + "…"
        console.print(Text(body), soft_wrap=True)
        console.print()
