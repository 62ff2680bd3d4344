"""Discovery: walk roots, apply ignore rules, hash what quarry can read.

A file the committed catalog already knows (``known``: its size, mtime and sha256, from
:func:`quarry.ingest.plan.known_files`) is not read again while its size and mtime are
unchanged and its ctime precedes the run that hashed it, as rsync's quick check and git's index decide: a re-run over a large unchanged tree
costs a directory walk and a ``stat`` per file, not a read of every byte. ``quarry index --full``
(or ``QUARRY_REHASH=1``) reads every file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from operator import attrgetter
from pathlib import Path

from quarry.core.errors import ParseError, UsageError
from quarry.core.models import FileError, FileInfo
from quarry.core.paths import check_patterns, display
from quarry.core.safeio import describe_os_error, hash_regular
from quarry.core.storeurl import is_source_url, root_path
from quarry.ingest.parsers import ARCHIVE_TYPES, detect_type, file_type_for
from quarry.ingest.parsers.archive import SEP, listing

IGNORE_FILE = ".quarryignore"
_NAME = attrgetter("name")


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


def _walk(
    root: Path, errors: list[FileError] | None = None, root_errors: list[str] | None = None
) -> Iterator[tuple[str, str]]:
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
                entries = sorted(it, key=_NAME)
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
            path = None  # set for a link only: a plain entry is named by its listing (no Path per file)
            if entry.is_symlink():
                try:
                    target = Path(entry.path).resolve(strict=True)
                except (OSError, RuntimeError):
                    continue  # dangling link or a loop the OS refuses to resolve
                if target == real_root or real_root not in target.parents:
                    continue  # never follow a link out of the root (or back to it)
                # A link inside the root names its target by the target's own path, so the
                # same file is one document however many links reach it.
                path, rel = target, target.relative_to(real_root).as_posix()
            try:
                if path is None:  # not a link: the directory listing already knows its type (no stat)
                    is_dir, is_file = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
                else:
                    is_dir, is_file = path.is_dir(), path.is_file()
            except OSError:  # a name too long for stat, a permission error on the way
                is_dir = is_file = False
            if is_dir:
                real = (path or Path(entry.path)).resolve()
                if real in seen_dirs:
                    continue
                seen_dirs.add(real)
                stack.append((real, rel + "/"))
            elif is_file:
                yield (entry.path if path is None else str(path)), rel


def discover(
    roots: Iterable[str | os.PathLike],
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    errors: list[FileError] | None = None,
    scans: list[RootScan] | None = None,
    known: dict[str, tuple[int, float, str, float]] | None = None,
) -> tuple[list[FileInfo], list[FileInfo]]:
    """Find files under ``roots``: folders, single files, and trees on object storage (``s3://``,
    ``gs://``, ``az://`` URLs: :func:`_objects`).

    Returns ``(readable, skipped)``: files of a supported type (hashed; an object carries the
    identity its listing states instead), and files quarry does not read (not hashed). A root
    that is a single file (or object) is accepted as-is. Files that vanish or cannot be read
    while being hashed, and directories that cannot be listed, are appended to ``errors`` (when
    given; else they are left out silently) and never stop the walk.

    ``scans``, when given, receives one :class:`RootScan` per root, and a root that does not
    exist is recorded there instead of raising :class:`UsageError`.

    ``FileInfo.path`` is the real name, which may hold surrogate-escaped bytes (quarry/core/paths.py);
    ``root`` and ``rel_path`` are display forms, always valid UTF-8.

    ``known``: ``{path: (size, mtime, sha256, trust_before)}`` of files whose bytes need not be read
    again while their size and mtime match and their ctime precedes ``trust_before`` (an archive is
    always read: its members are listed from it).
    """
    include, exclude = check_patterns(include, "--include"), check_patterns(exclude, "--exclude")
    found = _Found(include, exclude, errors)
    for raw in roots:
        if is_source_url(raw):
            scan = _objects(root_path(raw), found)
            if scan.status == "missing" and scans is None:
                raise UsageError(f"path not found: {raw} ({scan.error})")
            if scans is not None:
                scans.append(scan)
            continue
        root = Path(raw).expanduser().absolute()
        if not root.exists():
            if scans is None:
                raise UsageError(f"path not found: {raw}")
            scans.append(RootScan(str(root.resolve()), "missing", error="path not found"))
            continue
        root_errors: list[str] = []
        if root.is_file():
            candidates: Iterable[tuple[Path | str, str]] = [(root.resolve(), root.name)]
            base = root.parent.resolve()
            found.ignore = None
        else:
            base = root.resolve()
            found.ignore = _load_ignore(base)
            candidates = _walk(base, errors, root_errors)
        found.walked = found.matched = 0
        shown = display(str(base))
        for path, rel in candidates:
            found.add(
                rel,
                str(path),
                lambda key=str(path), rel=rel, shown=shown: _local_file(
                    key, shown, rel, found.errors, known, found.archives
                ),
            )
        if scans is not None:
            scans.append(
                RootScan(
                    str(root.resolve()),
                    _status(root_errors, found),
                    found.walked,
                    found.matched,
                    "; ".join(root_errors),
                )
            )
    return sorted(found.readable.values(), key=lambda f: f.path), found.skipped


def _status(root_errors: list[str], found: _Found) -> str:
    if root_errors:
        return "unreadable"
    if found.walked == 0:
        return "empty"
    if found.matched == 0:
        return "unmatched"
    return "ok"


class _Found:
    """What discovery keeps while it walks: readable files by path, skipped ones, and the counts of
    the root being walked (files seen, files the patterns leave)."""

    def __init__(self, include: tuple, exclude: tuple, errors: list[FileError] | None):
        self.include, self.exclude, self.errors = include, exclude, errors
        self.readable: dict[str, FileInfo] = {}
        self.skipped: list[FileInfo] = []
        self.archives = frozenset(ARCHIVE_TYPES)  # asked of every file: a set, not the registry's view
        self.ignore = None
        self.walked = self.matched = 0

    def add(self, rel: str, key: str, make) -> None:
        """Consider the file ``key`` at ``rel`` under its root; ``make()`` builds its
        :class:`FileInfo` (hashing it, for a file on disk) or returns None when it cannot be read."""
        self.walked += 1
        if self.ignore is not None and self.ignore.match_file(rel):
            return
        if self.exclude and _matches(rel, self.exclude):
            return
        # An archive that --include does not name may still hold members it names.
        member_include = ()
        if self.include and not _matches(rel, self.include):
            if file_type_for(key) not in self.archives:
                return
            member_include = self.include
        self.matched += not member_include  # an archive opened for --include counts the members it yields
        if key in self.readable:
            return  # reached twice (overlapping roots or an in-root symlink)
        info = make()
        if info is None:
            return
        if info.file_type in self.archives:
            for member in _members(info, rel, member_include, self.exclude, self.ignore, self.errors):
                self.matched += bool(member_include)
                if member.file_type:
                    self.readable.setdefault(member.path, member)
                else:
                    self.skipped.append(member)
        elif info.file_type:
            self.readable[key] = info
        else:
            self.skipped.append(info)


def _local_file(
    key: str,
    root: str,
    rel: str,
    errors: list[FileError] | None,
    known: dict[str, tuple[int, float, str, float]] | None = None,
    archives=ARCHIVE_TYPES,
) -> FileInfo | None:
    """A file on disk as a :class:`FileInfo`, its type detected and its bytes hashed (or its digest
    taken from ``known`` when its size and mtime match); None (and the reason in ``errors``) when
    it cannot be read."""
    ftype = ""
    try:
        ftype = detect_type(key)
        stat = os.stat(key)
        digest = ""
        vouched = None  # the quick check not tried
        if known is not None and ftype and ftype not in archives:
            seen = known.get(key)
            # the catalog keeps microseconds; a float mtime carries a few tenths of one. The ctime
            # (set by the system at any write, rename or restored mtime) must precede the hash too.
            if (
                seen is not None
                and seen[0] == stat.st_size
                and abs(seen[1] - stat.st_mtime) < 2e-6
                and stat.st_ctime <= seen[3]
            ):
                digest = seen[2]
            vouched = bool(digest)
        if ftype and not digest:
            digest = sha256_file(key)
    except (OSError, ParseError) as exc:
        if ftype and errors is not None:
            cause = f"cannot read file: {describe_os_error(exc)}" if isinstance(exc, OSError) else str(exc)
            errors.append(FileError(key, cause))
        return None
    return FileInfo.found(key, root, display(rel), ftype, stat.st_size, stat.st_mtime, digest, vouched)


def _objects(root: str, found: _Found) -> RootScan:
    """Discover the objects under the URL ``root`` by listing alone (no object is read but an
    archive whose members are not known yet, and ``.quarryignore``): each object's
    :class:`FileInfo` carries the identity its listing states where a file's sha256 goes.

    The listing streams page by page. Keys are taken as paths under the prefix: a hidden part
    (``.git/…``) is skipped as on disk, a folder marker (a key ending in ``/``) is no file. A root
    naming one object (``s3://b/docs/a.md``) is that object. A bucket that does not exist makes the
    root ``missing``; a listing that fails, ``unreadable`` (the deletion guard keeps its documents).
    Types come from the names: an object without a known suffix is not read to sniff it.
    """
    from quarry.ingest import sources

    scheme, bucket, prefix = sources.split_url(root)
    source = sources.open_source(scheme, bucket)
    found.walked = found.matched = 0
    under = f"{prefix}/" if prefix else ""
    try:
        found.ignore = _object_ignore(source, under)
        for obj in source.list(under):
            rel = obj.key[len(under) :]
            if not rel or rel.endswith("/") or any(part.startswith(".") or not part for part in rel.split("/")):
                continue
            found.add(rel, source.url(obj.key), lambda obj=obj, rel=rel: _object_file(source, root, rel, obj))
        if found.walked == 0 and prefix:
            single = source.head(prefix)
            if single is not None:  # its root stays the object's URL: permissions are kept per root
                name = prefix.rsplit("/", 1)[-1]
                found.ignore = None
                found.add(name, root, lambda: _object_file(source, root, name, single))
    except sources.BucketMissing as exc:
        return RootScan(root, "missing", error=str(exc))
    except sources.ListingFailed as exc:
        return RootScan(root, "unreadable", found.walked, found.matched, str(exc))
    return RootScan(root, _status([], found), found.walked, found.matched)


def _object_file(source, root: str, rel: str, obj) -> FileInfo:
    return FileInfo(
        path=source.url(obj.key),
        root=root,
        rel_path=rel,
        file_type=file_type_for(obj.key),
        size=obj.size,
        mtime=obj.mtime,
        sha256=obj.identity,
    )


def _object_ignore(source, under: str):
    """The ``.quarryignore`` object at the top of a root on object storage, as a matcher (None when
    there is none). One listing request a run; the rules are read only when their identity is new
    (kept in ``$QUARRY_CACHE_DIR/sources``)."""
    import hashlib

    from quarry.ingest.sources import cache_dir, fetch

    info = next((o for o in source.list(under + IGNORE_FILE) if o.key == under + IGNORE_FILE), None)
    if info is None:
        return None
    url = source.url(info.key)
    cached = cache_dir() / f"{hashlib.sha256(f'{url} {info.identity}'.encode()).hexdigest()[:32]}.ignore"
    try:
        text = cached.read_text(encoding="utf-8")
    except OSError:
        try:
            text = fetch(url, limit=1 << 20).read().decode("utf-8", errors="replace")
        except ParseError as exc:
            from quarry.ingest.sources import ListingFailed

            raise ListingFailed(f"cannot read its {IGNORE_FILE}: {exc}") from None
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(text, encoding="utf-8")
        except OSError:
            pass
    import pathspec

    return pathspec.PathSpec.from_lines("gitwildmatch", text.splitlines())


def _members(
    archive: FileInfo, rel: str, include: tuple, exclude: tuple, ignore, errors: list[FileError] | None
) -> Iterator[FileInfo]:
    """The members of ``archive`` as files (``<archive>!/<member>``), filtered like files on disk.

    An archive that cannot be listed, or that a bound refuses, is one failure (its members
    indexed before stay, as for any file that cannot be read); a member that cannot be read (over
    a bound, encrypted, an archive nested too deep) is a failure of its own.
    """
    opener = None
    if is_source_url(archive.path):
        from quarry.ingest.sources import open_object

        opener = lambda: open_object(archive.path)  # noqa: E731  (read only when the listing is not cached)
    try:
        members = listing(archive.path, archive.file_type, archive.sha256, opener=opener)
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
        info = FileInfo(
            path=f"{archive.path}{SEP}{m.name}",
            root=archive.root,
            rel_path=display(member_rel),
            file_type=file_type_for(m.name),
            size=m.size,
            mtime=m.mtime if m.mtime is not None else archive.mtime,
            sha256=m.digest,
            archive=archive.path,
        )
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
    if is_source_url(file.path):
        return "no extension (an object's type is known by its name: it is not read to sniff it)"
    return "no extension, and its content is not a format quarry reads"
