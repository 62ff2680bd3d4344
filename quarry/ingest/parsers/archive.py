"""Archives: ZIP (zipfile), TAR, TAR.GZ/BZ2/XZ (tarfile), 7z (py7zr). Their members are documents.

An archive is a container, not a document: discovery lists its members (:func:`listing`) and each
one becomes a file of its own, named ``<archive>!/<member>`` (``reports.zip!/2023/q4.pdf``), with
its own type, size and modification time. A member's identity is cheap to know without
unpacking it: ``crc32:<hex>:<size>`` from a ZIP's or 7z's directory, the sha256 of its bytes in a
TAR (which keeps no checksum of the data); an archive whose bytes are unchanged is not opened
again (its listing is kept by the archive's sha256 in ``$QUARRY_CACHE_DIR/archives``), and in a
changed one only members whose identity changed are parsed again. Archives inside archives are
opened up to :data:`MAX_DEPTH` levels (``a.zip!/b.tar.gz!/c.md``).

Bounds, as for a DOCX (a zip): an archive declaring more than ``QUARRY_MAX_ARCHIVE_MB`` (4096)
unpacked, more than :data:`MAX_MEMBERS` members or a ratio above :data:`MAX_RATIO`:1 (a zip bomb)
is refused whole, before anything is inflated; a member over ``QUARRY_MAX_FILE_MB`` or packed
above the ratio is one named failure. Readers never return more than a member's declared size.

Parsing reads members with :func:`read_members`: one pass over an archive for all the members a
batch needs (a compressed TAR or a solid 7z cannot seek to a member), so a batch's members cost
one decompression, not one each; only plain paths and bytes cross process boundaries.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from quarry.core.environment import environment
from quarry.core.errors import ParseError
from quarry.core.paths import ARCHIVE_SEP as SEP

MAX_MEMBERS = 100_000
MAX_DEPTH = 3  # an archive, one inside it, one inside that
MAX_RATIO = 100  # unpacked : packed, over RATIO_FLOOR
RATIO_FLOOR = 16 << 20  # below this an archive (or member) may compress as well as it likes
_LISTING_VERSION = 1
_BLOCK = 1 << 20

__all__ = [
    "SEP",
    "Member",
    "archive_kind",
    "listing",
    "list_members",
    "read_members",
    "split_member",
    "member_digest",
    "max_archive_bytes",
]


@dataclass(frozen=True)
class Member:
    """A member of an archive: its name inside it (nested: ``inner.zip!/x.md``), unpacked size,
    modification time (epoch seconds, or None), identity, and why it cannot be read (or "")."""

    name: str
    size: int
    mtime: float | None
    digest: str
    error: str = ""


def archive_kind(name: str) -> str:
    """ "zip", "tar" or "7z" for an archive's file name (by the suffixes in ``FORMATS``), else ""."""
    from quarry.ingest.parsers import ARCHIVE_TYPES, file_type_for

    kind = file_type_for(name)
    return kind if kind in ARCHIVE_TYPES else ""


def max_archive_bytes() -> int:
    """The most an archive may unpack to (``QUARRY_MAX_ARCHIVE_MB``, default 4096; 0 = no limit)."""
    return int(environment().max_archive_mb * (1 << 20))


def split_member(path: str, archive: str) -> list[str]:
    """The member names along ``path`` below ``archive``: ``a.zip!/b.zip!/c.md`` -> ["b.zip", "c.md"]."""
    if not path.startswith(archive + SEP):
        raise ValueError(f"{path!r} is not a member of {archive!r}")
    return path[len(archive) + len(SEP) :].split(SEP)


def member_digest(kind: str, data: bytes) -> str:
    """A member's identity from its bytes, as the archive's directory states it (see the module docstring)."""
    if kind == "tar":
        return hashlib.sha256(data).hexdigest()
    return f"crc32:{zlib.crc32(data) & 0xFFFFFFFF:08x}:{len(data)}"


# --- listing --------------------------------------------------------------------------------------


class _Refused(ParseError):
    """An archive (its nested ones included) over a bound: refused whole."""


class _Budget:
    """What one archive (its nested archives included) may unpack to and hold."""

    def __init__(self, packed: int):
        self.limit = max_archive_bytes()
        self.packed = max(packed, 1)
        self.bytes = 0
        self.members = 0

    def take(self, size: int, what: str) -> None:
        self.bytes += max(size, 0)
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise _Refused(f"refused: {what} holds more than {MAX_MEMBERS} members")
        if self.limit and self.bytes > self.limit:
            raise _Refused(
                f"refused: {what} would unpack to more than {self.limit >> 20} MB "
                "(QUARRY_MAX_ARCHIVE_MB): a zip bomb or too large"
            )
        if self.bytes > RATIO_FLOOR and self.bytes > MAX_RATIO * self.packed:
            raise _Refused(
                f"refused: {what} unpacks to {self.bytes // self.packed}x its size (limit {MAX_RATIO}x): a zip bomb"
            )


def listing(path: str, kind: str, sha256: str, opener=None) -> list[Member]:
    """The members of the archive at ``path`` (whose bytes hash to ``sha256``), kept per sha256.

    ``opener``, for an archive that is not a file on disk (an object: ``s3://b/a.zip``), is called
    only when the listing is not kept yet and gives a context manager of ``(binary file object,
    identity of its bytes)``; a listing is kept only under the identity of the bytes it was made from.
    ParseError, naming the cause, when the archive cannot be read or is refused by a bound.
    """
    from quarry.ingest.parsers import max_file_bytes

    key = hashlib.sha256(
        json.dumps(
            [_LISTING_VERSION, sha256, kind, max_archive_bytes(), max_file_bytes(), MAX_MEMBERS, MAX_DEPTH, MAX_RATIO]
        ).encode()
    ).hexdigest()[:32]
    cached = _cache_dir() / f"{key}.json"
    try:
        return [Member(**m) for m in json.loads(cached.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    if opener is None:
        from quarry.core.safeio import open_regular

        with open_regular(path) as fh:
            members = list_members(fh, kind, os.fstat(fh.fileno()).st_size)
    else:
        with opener() as (fh, identity):
            packed = fh.seek(0, io.SEEK_END)
            fh.seek(0)
            members = list_members(fh, kind, packed)
        if identity != sha256:  # rewritten since it was listed: right for this run, not for that identity
            return members
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps([asdict(m) for m in members]))
        os.replace(tmp, cached)
    except OSError:
        pass  # a read-only cache only costs the next run a listing
    return members


def _cache_dir():
    from pathlib import Path

    base = environment().cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "quarry")
    return Path(base) / "archives"


def list_members(source, kind: str, packed: int, depth: int = 0, budget: _Budget | None = None) -> list[Member]:
    """The regular-file members of an archive (a binary file object or bytes), nested ones expanded.

    A nested archive that cannot be read is one member with its error; the outer one still lists.
    """
    budget = budget if budget is not None else _Budget(packed)
    fh = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    what = {"zip": "ZIP", "tar": "TAR", "7z": "7z"}[kind]
    try:
        entries = {"zip": _zip_entries, "tar": _tar_entries, "7z": _7z_entries}[kind](fh, budget, what)
        out: list[Member] = []
        for name, size, mtime, digest, error, data in entries:
            inner = archive_kind(name)
            if not inner or error:
                out.append(Member(name, size, mtime, digest, error))
                continue
            if depth + 1 >= MAX_DEPTH:
                out.append(Member(name, size, mtime, digest, f"archive nested more than {MAX_DEPTH} deep: not opened"))
                continue
            try:
                if data is None:
                    data = _read_one(fh, kind, name)
                nested = list_members(data, inner, len(data), depth + 1, budget)
            except _Refused:
                raise  # a bomb inside is the whole archive's
            except ParseError as exc:
                out.append(Member(name, size, mtime, digest, str(exc)))
                continue
            out.extend(
                Member(f"{name}{SEP}{m.name}", m.size, m.mtime if m.mtime is not None else mtime, m.digest, m.error)
                for m in nested
            )
        return out
    except ParseError:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        tarfile.TarError,
        EOFError,
        OSError,
        ValueError,
        KeyError,
        NotImplementedError,
        RuntimeError,
        zlib.error,
    ) as exc:
        raise ParseError(f"corrupt {what} archive: {_one_line(exc)}") from exc
    except Exception as exc:  # py7zr's own errors, lzma/bz2 errors
        if _is_password_error(exc):
            raise ParseError("encrypted (password required)") from exc
        raise ParseError(f"corrupt {what} archive: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    from quarry.ingest.parsers import one_line

    return one_line(exc)


def _member_error(size: int, packed: int | None, name: str = "") -> str:
    from quarry.ingest.parsers import max_file_bytes

    if SEP in name:
        return f"a member name holding '{SEP}', which names members of archives: not read"
    limit = max_file_bytes()
    if limit and size > limit:
        return f"file is over the {limit >> 20} MB limit (QUARRY_MAX_FILE_MB); skipped"
    if packed is not None and size > RATIO_FLOOR and size > MAX_RATIO * max(packed, 1):
        return f"refused: unpacks to {size // max(packed, 1)}x its packed size (limit {MAX_RATIO}x): a zip bomb"
    return ""


def _zip_entries(fh, budget: _Budget, what: str):
    zf = zipfile.ZipFile(fh)
    infos = [i for i in zf.infolist() if not i.is_dir()]
    if len(infos) > MAX_MEMBERS:
        raise _Refused(f"refused: {what} archive holds {len(infos)} members (limit {MAX_MEMBERS})")
    for info in infos:  # all declared sizes first: a bomb is refused before anything inflates
        budget.take(info.file_size, f"{what} archive")
    for info in infos:
        name = _clean_name(info.filename)
        if not name:
            continue
        error = (
            "encrypted (password required)"
            if info.flag_bits & 0x1
            else _member_error(info.file_size, info.compress_size, name)
        )
        yield (name, info.file_size, _zip_time(info.date_time), f"crc32:{info.CRC:08x}:{info.file_size}", error, None)


def _zip_time(date_time) -> float | None:
    try:
        return time.mktime((*date_time, 0, 0, -1))  # ZIP keeps local time without a zone
    except (OverflowError, ValueError):
        return None


def _tar_entries(fh, budget: _Budget, what: str):
    # One pass in stream mode: a compressed TAR cannot seek, and the data must be read to hash it.
    tf = tarfile.open(fileobj=fh, mode="r|*")
    for info in tf:
        if not info.isreg():
            continue  # directories, links, devices: nothing of their own to read
        budget.take(info.size, f"{what} archive")
        name = _clean_name(info.name)
        error = _member_error(info.size, None, name)
        if not name:
            continue
        if error:
            yield name, info.size, float(info.mtime) or None, "", error, None
            continue
        src = tf.extractfile(info)
        assert src is not None  # a regular file's member
        h = hashlib.sha256()
        keep: list[bytes] | None = [] if archive_kind(name) else None  # a nested archive is listed from its bytes
        while block := src.read(_BLOCK):
            h.update(block)
            if keep is not None:
                keep.append(block)
        yield (
            name,
            info.size,
            float(info.mtime) or None,
            h.hexdigest(),
            "",
            b"".join(keep) if keep is not None else None,
        )


def _7z_entries(fh, budget: _Budget, what: str):
    import py7zr

    with py7zr.SevenZipFile(fh, mode="r") as z:
        if z.needs_password():
            raise ParseError("encrypted (password required)")
        files = [f for f in z.list() if not f.is_directory]
    if len(files) > MAX_MEMBERS:
        raise _Refused(f"refused: {what} archive holds {len(files)} members (limit {MAX_MEMBERS})")
    for f in files:
        budget.take(f.uncompressed or 0, f"{what} archive")
    for f in files:  # yielded after the archive is closed: a nested one is read from it anew
        name = _clean_name(f.filename)
        if not name:
            continue
        size = f.uncompressed or 0
        mtime = f.creationtime.timestamp() if getattr(f, "creationtime", None) else None
        digest = f"crc32:{f.crc32:08x}:{size}" if f.crc32 is not None else f"size:{size}"
        yield name, size, mtime, digest, _member_error(size, None, name), None


def _clean_name(name: str) -> str:
    """A member name as a relative POSIX path: no leading ``/`` or ``./``, Windows separators turned."""
    name = name.replace("\\", "/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts)


def _is_password_error(exc: BaseException) -> bool:
    return "password" in type(exc).__name__.lower() or "password" in str(exc).lower()


# --- reading --------------------------------------------------------------------------------------


def read_members(
    archive: str, names: Iterable[list[str]], source=None
) -> Iterator[tuple[list[str], bytes | ParseError, str]]:
    """``(name path, bytes or the error, digest)`` for each wanted member of the archive file at ``archive``
    (read from ``source``, a binary file object, when given: an archive on object storage).

    ``names`` are name paths as :func:`split_member` gives them (``["b.zip", "c.md"]`` for a member of
    a nested archive). Each archive on the way is read once, whatever the number of members.
    """
    from quarry.core.safeio import open_regular

    wanted = [list(n) for n in names]
    kind = archive_kind(archive)
    if source is not None:
        yield from _read_from(source, kind, wanted, depth=0)
        return
    try:
        fh = open_regular(archive)
    except ParseError as exc:
        for n in wanted:
            yield n, exc, ""
        return
    with fh:
        yield from _read_from(fh, kind, wanted, depth=0)


def _read_from(
    fh, kind: str, wanted: list[list[str]], depth: int
) -> Iterator[tuple[list[str], bytes | ParseError, str]]:
    direct = {n[0] for n in wanted if len(n) == 1}
    nested: dict[str, list[list[str]]] = {}
    for n in wanted:
        if len(n) > 1:
            nested.setdefault(n[0], []).append(n[1:])
    need = direct | set(nested)
    found: dict[str, bytes | ParseError] = {}
    try:
        for name, data in _extract(fh, kind, need):
            found[name] = data
    except ParseError as exc:
        for name in need - set(found):
            found[name] = exc
    except Exception as exc:  # noqa: BLE001 - each archive library raises its own types: every member missing gets the reason
        error = ParseError(
            "encrypted (password required)" if _is_password_error(exc) else f"cannot read archive: {_one_line(exc)}"
        )
        for name in need - set(found):
            found[name] = error
    for name in sorted(need):
        data = found.get(name, ParseError("member is gone from the archive (changed since discovery)"))
        if name in direct:
            yield [name], data, member_digest(kind, data) if isinstance(data, bytes) else ""
        for rest in nested.get(name, ()):
            if not isinstance(data, bytes):
                yield [name, *rest], data, ""
        if name in nested and isinstance(data, bytes):
            inner = archive_kind(name)
            if depth + 1 >= MAX_DEPTH:
                error = ParseError(f"archive nested more than {MAX_DEPTH} deep: not opened")
                for rest in nested[name]:
                    yield [name, *rest], error, ""
                continue
            for rest, inner_data, digest in _read_from(io.BytesIO(data), inner, nested[name], depth + 1):
                yield [name, *rest], inner_data, digest
        found.pop(name, None)  # one member's bytes at a time past this point


def _read_one(fh, kind: str, name: str) -> bytes:
    for _name, data in _extract(fh, kind, {name}):
        if isinstance(data, ParseError):
            raise data
        return data
    raise ParseError(f"member {name} not found")


def _extract(fh, kind: str, names: set[str]) -> Iterator[tuple[str, bytes | ParseError]]:
    """``(name, bytes or error)`` for members of ``names`` found in the archive, in archive order."""
    from quarry.ingest.parsers import max_file_bytes

    limit = max_file_bytes()
    if kind == "zip":
        fh.seek(0)
        zf = zipfile.ZipFile(fh)
        by_name = {_clean_name(i.filename): i for i in zf.infolist() if not i.is_dir()}
        for name in sorted(names):
            info = by_name.get(name)
            if info is None:
                continue
            error = _member_error(info.file_size, info.compress_size)
            if info.flag_bits & 0x1:
                error = "encrypted (password required)"
            # zipfile never returns more than the declared size and checks the CRC at the end
            yield name, ParseError(error) if error else zf.read(info)
    elif kind == "tar":
        fh.seek(0)
        left = set(names)
        with tarfile.open(fileobj=fh, mode="r|*") as tf:
            for member in tf:
                if not left:
                    break
                name = _clean_name(member.name)
                if not member.isreg() or name not in left:
                    continue
                left.discard(name)
                error = _member_error(member.size, None)
                if error:
                    yield name, ParseError(error)
                    continue
                src = tf.extractfile(member)
                assert src is not None  # a regular file's member
                yield name, src.read(member.size)
    elif kind == "7z":
        import py7zr
        from py7zr.io import BytesIOFactory

        fh.seek(0)
        with py7zr.SevenZipFile(fh, mode="r") as z:
            if z.needs_password():
                raise ParseError("encrypted (password required)")
            by_name = {_clean_name(f.filename): f.filename for f in z.list() if not f.is_directory}
            targets = {by_name[n]: n for n in names if n in by_name}
            sizes = {f.filename: f.uncompressed or 0 for f in z.list()}
            ok = [t for t in targets if not _member_error(sizes.get(t, 0), None)]
            for t in targets:
                if t not in ok:
                    yield targets[t], ParseError(_member_error(sizes.get(t, 0), None))
            if ok:
                factory = BytesIOFactory(limit or (1 << 62))
                z.extract(targets=ok, factory=factory)
                for t in ok:
                    try:
                        buf = factory.get(t)
                    except KeyError:
                        continue
                    buf.seek(0)
                    yield targets[t], buf.read()
    else:
        raise ParseError(f"not an archive kind: {kind}")


def parse_archive(data: bytes, kind: str):
    """An archive is not parsed as one document: discovery lists its members (a mail attachment
    that is an archive is listed in the message's metadata only)."""
    raise ParseError(f"{kind} archive: its members are indexed as documents of their own, not the archive")
