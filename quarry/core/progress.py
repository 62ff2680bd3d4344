"""A progress bar with a known total, shown on a terminal when the CLI turns it on."""

from __future__ import annotations

import sys

_enabled = False


def enable(on: bool = True) -> None:
    """Show progress bars (on standard error, and only when it is a terminal)."""
    global _enabled
    _enabled = on


class _NullBar:
    def advance(self, n: int = 1, **fields) -> None:
        pass

    def stop(self) -> None:
        pass


class _RichBar:
    def __init__(self, description: str, total: int):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("files · {task.fields[chunks]} chunks"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total, chunks=0)
        self._progress.start()

    def advance(self, n: int = 1, **fields) -> None:
        self._progress.update(self._task, advance=n, **fields)

    def stop(self) -> None:
        self._progress.stop()


def start(description: str, total: int):
    """A bar over ``total`` items; a no-op object when bars are off or there is nothing to do."""
    if _enabled and total and sys.stderr.isatty():
        return _RichBar(description, total)
    return _NullBar()
