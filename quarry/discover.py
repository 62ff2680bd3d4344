"""Discovery: walk roots, apply ignore rules, hash what quarry can read."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from fnmatch import fnmatch
from pathlib import Path

from quarry.errors import UsageError
from quarry.models import FileInfo
from quarry.parsers import detect_type

IGNORE_FILE = ".quarryignore"
_HASH_BLOCK = 1 << 20


def sha256_file(path: str) -> str:
    """The hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def _load_ignore(root: Path):
    """A gitignore-style matcher from ``root/.quarryignore``, or None."""
    path = root / IGNORE_FILE
    if not path.is_file():
        return None
    import pathspec

    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return pathspec.PathSpec.from_lines("gitwildmatch", lines)


def _matches(rel: str, patterns: Iterable[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch(rel, p) or fnmatch(name, p) for p in patterns)


def _walk(root: Path) -> Iterator[tuple[Path, str]]:
    """Yield (absolute path, root-relative POSIX path) of regular files under ``root``.

    Hidden entries are skipped. Symlinks are followed only when they resolve inside the root,
    and every directory is entered at most once (by its resolved path), so link loops end.
    """
    real_root = root.resolve()
    seen_dirs = {real_root}
    stack = [(real_root, "")]
    while stack:
        directory, rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = f"{rel_dir}{entry.name}"
            path = Path(entry.path)
            if entry.is_symlink():
                try:
                    target = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    continue  # dangling link or a loop the OS refuses to resolve
                if target == real_root or real_root not in target.parents:
                    continue  # never follow a link out of the root (or back to it)
                # A link inside the root names its target by the target's own path, so the
                # same file is one document however many links reach it.
                path, rel = target, target.relative_to(real_root).as_posix()
            if path.is_dir():
                real = path.resolve()
                if real in seen_dirs:
                    continue
                seen_dirs.add(real)
                stack.append((real, rel + "/"))
            elif path.is_file():
                yield path, rel


def discover(
    roots: Iterable[str | os.PathLike],
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
) -> tuple[list[FileInfo], list[FileInfo]]:
    """Find files under ``roots``.

    Returns ``(readable, skipped)``: files of a supported type (hashed), and files quarry does
    not read (not hashed). A root that is a single file is accepted as-is.
    """
    include, exclude = tuple(include), tuple(exclude)
    readable: dict[str, FileInfo] = {}
    skipped: list[FileInfo] = []
    for raw in roots:
        root = Path(raw).expanduser().absolute()
        if not root.exists():
            raise UsageError(f"path not found: {raw}")
        if root.is_file():
            candidates = [(root.resolve(), root.name)]
            base = root.parent.resolve()
        else:
            base = root.resolve()
            ignore = _load_ignore(base)
            candidates = (
                (p, rel) for p, rel in _walk(base) if not (ignore is not None and ignore.match_file(rel))
            )
        for path, rel in candidates:
            if include and not _matches(rel, include):
                continue
            if exclude and _matches(rel, exclude):
                continue
            key = str(path)
            if key in readable:
                continue  # reached twice (overlapping roots or an in-root symlink)
            stat = path.stat()
            ftype = detect_type(key)
            info = FileInfo(
                path=key,
                root=str(base),
                rel_path=rel,
                file_type=ftype,
                size=stat.st_size,
                mtime=stat.st_mtime,
                sha256=sha256_file(key) if ftype else "",
            )
            if ftype:
                readable[key] = info
            else:
                skipped.append(info)
    return sorted(readable.values(), key=lambda f: f.path), skipped
