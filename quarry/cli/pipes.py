"""A reader that goes away is not an error: ``quarry search … | head -1``.

When the other end of a pipe closes, a write raises ``BrokenPipeError`` (Python ignores
SIGPIPE). A command would then fail with a traceback or exit 1 after doing its work. quarry wraps
standard output and standard error so that a write to a closed pipe sends that stream to
``/dev/null`` from then on: the command finishes what it was doing (an index run commits, a
failed run still exits 3) and prints nothing more there, quietly.

Why not ``signal(SIGPIPE, SIG_DFL)``: that kills the process at the first write, and an index
run whose progress goes to a closed pipe would die mid-run.
"""

from __future__ import annotations

import errno
import os
import sys

__all__ = ["guard_std_streams", "PipeGuard"]


class PipeGuard:
    """A stream (text or binary) whose writes and flushes never raise for a closed pipe."""

    def __init__(self, stream):
        self._stream = stream
        self.broken = False

    def _closed(self) -> None:
        self.broken = True
        try:  # later writes, and the interpreter's last flush, go nowhere instead of raising
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, data):
        if self.broken:
            return len(data)
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            self._closed()
            return len(data)
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            self._closed()
            return len(data)

    def flush(self) -> None:
        if self.broken:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            self._closed()

    @property
    def buffer(self):
        inner = getattr(self._stream, "buffer", None)
        return PipeGuard(inner) if inner is not None else None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def guard_std_streams() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in :class:`PipeGuard` (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, PipeGuard):
            setattr(sys, name, PipeGuard(stream))
