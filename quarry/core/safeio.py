"""Reading files in trees quarry does not control.

Between discovery and parsing a file can be deleted, truncated, rewritten, or replaced by a
FIFO, a device node or a directory. Opening a FIFO with a plain ``open()`` blocks until a
writer appears, which would hang an unattended run forever; so every read goes through
:func:`open_regular`, which opens without blocking and refuses anything that is not a regular
file, and the bytes a parser sees are the bytes that get hashed (:func:`read_regular`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import BinaryIO

from quarry.core.errors import ParseError

__all__ = ["open_regular", "read_regular", "hash_regular", "describe_os_error", "fsync_dir"]

_BLOCK = 1 << 20


def describe_os_error(exc: OSError) -> str:
    """An OSError as a cause a person understands, without repeating the (possibly odd) path."""
    reasons = {
        "ENOENT": "file disappeared before it could be read",
        "EACCES": "permission denied",
        "EPERM": "permission denied",
        "EISDIR": "became a directory before it could be read",
        "ENAMETOOLONG": "path too long for the operating system",
        "ELOOP": "replaced by a symbolic link before it could be read (not followed)",
        "EIO": "I/O error from the device",
    }
    name = errno.errorcode.get(exc.errno or 0, "")
    return reasons.get(name) or (exc.strerror or type(exc).__name__)


def open_regular(path: str) -> BinaryIO:
    """A binary file object for ``path``, opened without blocking; ParseError unless a regular file."""
    try:
        # O_NOFOLLOW: discovery hands over resolved paths, so a link here was put in place of the
        # file after discovery, and may point out of the root.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as exc:
        raise ParseError(f"cannot read file: {describe_os_error(exc)}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a directory"
                if stat.S_ISDIR(mode)
                else "not a regular file"
            )
            raise ParseError(f"not a regular file ({kind}); skipped without reading it")
        # Back to blocking reads: a regular file never blocks, and buffered reads expect it.
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str, limit: int = 0) -> tuple[bytes, str]:
    """``(bytes, sha256 of those bytes)`` of a regular file; ParseError past ``limit`` bytes (0: none)."""
    h = hashlib.sha256()
    parts = []
    total = 0
    try:
        with open_regular(path) as fh:
            while block := fh.read(_BLOCK):
                total += len(block)
                if limit and total > limit:
                    raise ParseError(f"file is over the {limit >> 20} MB limit (QUARRY_MAX_FILE_MB); skipped")
                h.update(block)
                parts.append(block)
    except OSError as exc:
        raise ParseError(f"cannot read file: {describe_os_error(exc)}") from exc
    return b"".join(parts), h.hexdigest()


def hash_regular(path: str) -> str:
    """The hex sha256 of a regular file's bytes (ParseError for anything else, or a read error)."""
    h = hashlib.sha256()
    try:
        with open_regular(path) as fh:
            while block := fh.read(_BLOCK):
                h.update(block)
    except OSError as exc:
        raise ParseError(f"cannot read file: {describe_os_error(exc)}") from exc
    return h.hexdigest()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory's entries to disk: after a rename, so that the new name survives a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
