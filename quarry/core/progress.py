"""Progress of an index run on standard error: files, chunks, rate, ETA and OCR pages.

On a terminal, a bar that redraws four times a second (the elapsed time and the ETA move even
while a batch is in flight). Anywhere else (cron, a log file, CI), one line every
:data:`LINE_SECONDS` seconds, so a long run's log shows it is alive and how far it got; a run
shorter than that prints nothing. Off unless a caller turns it on (the CLI does).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Protocol

LINE_SECONDS = 5.0

_enabled = False


def enable(on: bool = True) -> None:
    """Show progress (on standard error) for the runs that start after this call."""
    global _enabled
    _enabled = on


class Bar(Protocol):
    """What :func:`start` returns: a display advanced by files done."""

    def advance(self, n: int = 1, chunks: int | None = None, ocr_pages: int | None = None) -> None: ...

    def stop(self) -> None: ...


class _NullBar:
    def advance(self, n: int = 1, chunks: int | None = None, ocr_pages: int | None = None) -> None:
        pass

    def stop(self) -> None:
        pass


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class _State:
    """Counts shared by both kinds of bar; ``advance`` may come from any thread."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self.chunks = 0
        self.ocr_pages = 0
        self.started = time.monotonic()
        self.guard = threading.Lock()

    def advance(self, n: int, chunks: int | None = None, ocr_pages: int | None = None) -> None:
        with self.guard:
            self.done += n
            if chunks is not None:
                self.chunks = chunks
            if ocr_pages is not None:
                self.ocr_pages = ocr_pages

    def line(self, description: str) -> str:
        with self.guard:
            done, chunks, ocr = self.done, self.chunks, self.ocr_pages
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (
            _duration((self.total - done) / rate)
            if rate > 0 and done < self.total
            else ("-" if done < self.total else "0s")
        )
        parts = [
            f"{description}: {done}/{self.total} files ({100 * done // max(1, self.total)}%)",
            f"{chunks} chunks",
            f"{rate:.1f} files/s",
            f"elapsed {_duration(elapsed)}",
            f"ETA {eta}",
        ]
        if ocr:
            parts.append(f"OCR {ocr} pages")
        return " · ".join(parts)


class _LineBar:
    """A line on standard error every ``interval`` seconds, from a thread of its own."""

    def __init__(self, description: str, total: int, interval: float | None = None):
        self.description = description
        self.state = _State(total)
        self.interval = interval or LINE_SECONDS
        self.printed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quarry-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._print()

    def _print(self) -> None:
        try:
            print(self.state.line(self.description), file=sys.stderr, flush=True)
            self.printed = True
        except (OSError, ValueError):  # stderr closed: progress is a convenience
            pass

    def advance(self, n: int = 1, chunks: int | None = None, ocr_pages: int | None = None) -> None:
        self.state.advance(n, chunks, ocr_pages)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self.printed:  # a run long enough to have shown progress also shows where it ended
            self._print()


class _RichBar:
    def __init__(self, description: str, total: int):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.state = _State(total)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("files · {task.fields[chunks]} chunks · {task.fields[rate]} files/s{task.fields[ocr]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task(description, total=total, chunks=0, rate="0.0", ocr="")
        self._progress.start()

    def advance(self, n: int = 1, chunks: int | None = None, ocr_pages: int | None = None) -> None:
        self.state.advance(n, chunks, ocr_pages)
        elapsed = time.monotonic() - self.state.started
        self._progress.update(
            self._task,
            advance=n,
            chunks=self.state.chunks,
            rate=f"{self.state.done / elapsed:.1f}" if elapsed > 0 else "0.0",
            ocr=f" · OCR {self.state.ocr_pages} pages" if self.state.ocr_pages else "",
        )

    def stop(self) -> None:
        self._progress.stop()


def start(description: str, total: int) -> Bar:
    """A progress display over ``total`` files; a no-op object when progress is off or there is
    nothing to do."""
    if not _enabled or not total:
        return _NullBar()
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return _RichBar(description, total) if tty else _LineBar(description, total)
