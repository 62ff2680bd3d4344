"""Discovery: walk roots, apply ignore rules, hash what quarry can read."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from quarry.core.errors import ParseError, UsageError
from quarry.core.models import FileError, FileInfo
from quarry.ingest.parsers import ARCHIVE_TYPES, detect_type, file_type_for
from quarry.ingest.parsers.archive import SEP, listing
from quarry.core.paths import check_patterns, display
from quarry.core.safeio import describe_os_error, hash_regular

IGNORE_FILE = ".quarryignore"


@dataclass(frozen=True)
class RootScan:
    """What discovery found under one root, before and after the patterns.

    ``status``: ``ok``; ``missing`` (the path does not exist); ``unreadable`` (its listing
    failed: ``error`` says why); ``empty`` (no regular file under it at all: an unmounted share
    or a folder being synced looks like this); ``unmatched`` (files exist, but ``--include`` /
    ``--exclude`` / ``.quarryignore`` leave none of them). The deletion guard
    (:mod:`quarry.ingest.guard`) decides what each means for the documents indexed from it.
    """

    root: str  # absolute path, as the documents' scope
    status: str
    walked: int = 0  # regular files seen, before the patterns
    matched: int = 0  # files left after the patterns (supported or not)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def sha256_file(path: str) -> str:
    """The hex sha256 of a regular file's bytes (never blocks on a FIFO swapped in; see safeio)."""
    return hash_regular(path)


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


def _walk(root: Path, errors: list[FileError] | None = None, root_errors: list[str] | None = None
          ) -> Iterator[tuple[Path, str]]:
    """Yield (absolute path, root-relative POSIX path) of regular files under ``root``.

    Hidden entries are skipped. Symlinks are followed only when they resolve inside the root,
    and every directory is entered at most once (by its resolved path), so link loops end.
    FIFOs, sockets and device nodes are not regular files: never yielded, never opened.
    A directory that cannot be listed is reported in ``errors`` (when given); the root itself,
    in ``root_errors`` (when given).
    """
    real_root = root.resolve()
    seen_dirs = {real_root}
    stack = [(real_root, "")]
    while stack:
        directory, rel_dir = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if directory == real_root:
                if root_errors is not None:
                    root_errors.append(f"cannot list it: {describe_os_error(exc)}")
            elif errors is not None:
                errors.append(FileError(str(directory), f"cannot list directory: {describe_os_error(exc)}"))
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = f"{rel_dir}{entry.name}"
            path = entry_path = Path(entry.path)
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
            try:
                if path is entry_path:  # not a link: the directory listing already knows its type (no stat)
                    is_dir, is_file = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
                else:
                    is_dir, is_file = path.is_dir(), path.is_file()
            except OSError:  # a name too long for stat, a permission error on the way
                is_dir = is_file = False
            if is_dir:
                real = path.resolve()
                if real in seen_dirs:
                    continue
                seen_dirs.add(real)
                stack.append((real, rel + "/"))
            elif is_file:
                yield path, rel


def discover(
    roots: Iterable[str | os.PathLike],
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    errors: list[FileError] | None = None,
    scans: list[RootScan] | None = None,
) -> tuple[list[FileInfo], list[FileInfo]]:
    """Find files under ``roots``.

    Returns ``(readable, skipped)``: files of a supported type (hashed), and files quarry does
    not read (not hashed). A root that is a single file is accepted as-is. Files that vanish or
    cannot be read while being hashed, and directories that cannot be listed, are appended to
    ``errors`` (when given; else they are left out silently) and never stop the walk.

    ``scans``, when given, receives one :class:`RootScan` per root, and a root that does not
    exist is recorded there instead of raising :class:`UsageError`.

    ``FileInfo.path`` is the real name, which may hold surrogate-escaped bytes (quarry/core/paths.py);
    ``root`` and ``rel_path`` are display forms, always valid UTF-8.
    """
    include, exclude = check_patterns(include, "--include"), check_patterns(exclude, "--exclude")
    readable: dict[str, FileInfo] = {}
    skipped: list[FileInfo] = []
    for raw in roots:
        root = Path(raw).expanduser().absolute()
        if not root.exists():
            if scans is None:
                raise UsageError(f"path not found: {raw}")
            scans.append(RootScan(str(root.resolve()), "missing", error="path not found"))
            continue
        root_errors: list[str] = []
        ignore = None
        if root.is_file():
            candidates = [(root.resolve(), root.name)]
            base = root.parent.resolve()
        else:
            base = root.resolve()
            ignore = _load_ignore(base)
            candidates = _walk(base, errors, root_errors)
        walked = matched = 0
        for path, rel in candidates:
            walked += 1
            if ignore is not None and ignore.match_file(rel):
                continue
            if exclude and _matches(rel, exclude):
                continue
            # An archive that --include does not name may still hold members it names.
            member_include = ()
            if include and not _matches(rel, include):
                if file_type_for(str(path)) not in ARCHIVE_TYPES:
                    continue
                member_include = include
            matched += not member_include  # an archive opened for --include counts the members it yields
            key = str(path)
            if key in readable:
                continue  # reached twice (overlapping roots or an in-root symlink)
            ftype = ""
            try:
                ftype = detect_type(key)
                stat = path.stat()
                digest = sha256_file(key) if ftype else ""
            except (OSError, ParseError) as exc:
                if ftype and errors is not None:
                    cause = f"cannot read file: {describe_os_error(exc)}" if isinstance(exc, OSError) else str(exc)
                    errors.append(FileError(key, cause))
                continue
            info = FileInfo(
                path=key,
                root=display(str(base)),
                rel_path=display(rel),
                file_type=ftype,
                size=stat.st_size,
                mtime=stat.st_mtime,
                sha256=digest,
            )
            if ftype in ARCHIVE_TYPES:
                for member in _members(info, rel, member_include, exclude, ignore, errors):
                    matched += bool(member_include)
                    if member.file_type:
                        readable.setdefault(member.path, member)
                    else:
                        skipped.append(member)
            elif ftype:
                readable[key] = info
            else:
                skipped.append(info)
        if scans is not None:
            if root_errors:
                status = "unreadable"
            elif walked == 0:
                status = "empty"
            elif matched == 0:
                status = "unmatched"
            else:
                status = "ok"
            scans.append(RootScan(str(root.resolve()), status, walked, matched, "; ".join(root_errors)))
    return sorted(readable.values(), key=lambda f: f.path), skipped


def _members(archive: FileInfo, rel: str, include: tuple, exclude: tuple, ignore,
             errors: list[FileError] | None) -> Iterator[FileInfo]:
    """The members of ``archive`` as files (``<archive>!/<member>``), filtered like files on disk.

    An archive that cannot be listed, or that a bound refuses, is one failure (its members
    indexed before stay, as for any file that cannot be read); a member that cannot be read (over
    a bound, encrypted, an archive nested too deep) is a failure of its own.
    """
    try:
        members = listing(archive.path, archive.file_type, archive.sha256)
    except ParseError as exc:
        if errors is not None:
            errors.append(FileError(archive.path, str(exc)))
        return
    for m in members:
        member_rel = f"{rel}{SEP}{m.name}"
        if include and not _matches(member_rel, include):
            continue
        if exclude and _matches(member_rel, exclude):
            continue
        if ignore is not None and ignore.match_file(member_rel):
            continue
        info = FileInfo(path=f"{archive.path}{SEP}{m.name}", root=archive.root, rel_path=display(member_rel),
                        file_type=file_type_for(m.name), size=m.size,
                        mtime=m.mtime if m.mtime is not None else archive.mtime, sha256=m.digest,
                        archive=archive.path)
        if m.error and info.file_type:
            if errors is not None:
                errors.append(FileError(info.path, m.error))
            continue
        yield info


def unsupported_reason(file: FileInfo) -> str:
    """Why discovery did not read ``file``, in words for the run report."""
    suffix = os.path.splitext(file.rel_path)[1].lower()
    if suffix:
        return f"{suffix} is not a format quarry reads"
    return "no extension, and its content is not a format quarry reads"
