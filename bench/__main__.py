"""``python bench``: the bench scripts by what they measure, each with the first sentence of its docstring.

Run one as ``python bench/<name>.py`` (``--help`` lists its options); each prints a table and
writes JSON under bench/results/.
"""

from __future__ import annotations

import argparse
import ast

from common import CONCERNS, ROOT, table


def summary(name: str) -> str:
    """The first sentence of the script's docstring."""
    doc = ast.get_docstring(ast.parse((ROOT / "bench" / f"{name}.py").read_text())) or ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python bench", description=__doc__.splitlines()[0])
    parser.add_argument("concern", nargs="?", choices=sorted(CONCERNS), help="list only this concern's scripts")
    args = parser.parse_args()
    rows = [
        [concern, f"bench/{name}.py", summary(name)]
        for concern, names in CONCERNS.items()
        if args.concern in (None, concern)
        for name in names
    ]
    print(table(["concern", "script", "what it measures"], rows))


if __name__ == "__main__":
    main()
