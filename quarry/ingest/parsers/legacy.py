"""Legacy binary Word and PowerPoint files (DOC, PPT) through LibreOffice, headless.

LibreOffice converts the file to DOCX or PPTX in a temporary folder, which the DOCX and PPTX
parsers then read, so a converted file keeps what theirs keep: heading styles and tables in
body order, a section and a page per slide. Chosen by measurement (docs/benchmarks.md,
``bench/legacy_office.py``): on the real legacy files at hand antiword and catdoc/catppt failed
on most (Word 2003+ files, every PPT), and aspose-words-foss dropped table text and read no PPT.

LibreOffice is a system program, optional like tesseract: found as ``soffice`` (or
``libreoffice``) on the PATH or at ``$QUARRY_SOFFICE``, named by ``quarry formats`` when missing,
and then each such file fails with a line saying what to install. A conversion runs inside the
parser, so in the parse pool under the per-file timeout; GNU ``timeout`` also bounds the
LibreOffice process group itself (``QUARRY_PARSE_TIMEOUT``, 120 s), so a parse worker killed for
its timeout never leaves a converter behind. Each conversion has a profile folder of its own:
two LibreOffice processes sharing one refuse to run side by side.

LibreOffice's start costs about 1.5 s and each file after it tens of milliseconds, so the legacy
files of a batch are converted by one LibreOffice call first (:func:`convert_many`, from
``process.parse_files``, bounded by the per-file timeout as a whole); a file that call does not
convert (a hang, a crash, a file it cannot read) is converted alone afterwards, in the pool, which
names its failure.

A file named ``.doc``/``.ppt`` that is really something else (an OOXML package, RTF, HTML) was
already sent to its own parser by its content (``parsers.parse_bytes``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from quarry.core.environment import environment
from quarry.core.errors import ParseError

_TARGET = {"doc": "docx", "ppt": "pptx"}
CONVERTED = frozenset(_TARGET)
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_WHAT = {"doc": "legacy Word", "ppt": "legacy PowerPoint", "xls": "legacy Excel"}
INSTALL_HINT = "install LibreOffice (Debian: apt install libreoffice-writer-nogui libreoffice-impress-nogui)"


def soffice() -> str | None:
    """The LibreOffice program: ``$QUARRY_SOFFICE`` when set, else ``soffice`` or ``libreoffice`` on the PATH."""
    configured = environment().soffice
    if configured:
        return configured if os.path.isfile(configured) and os.access(configured, os.X_OK) else None
    return shutil.which("soffice") or shutil.which("libreoffice")


def parse_legacy(data: bytes, kind: str):
    """Parse a DOC or PPT: convert it with LibreOffice, then read the result as DOCX or PPTX."""
    from quarry.ingest.parsers import parse_bytes

    target = _TARGET[kind]
    return parse_bytes(convert(data, kind, target), target)


def needs_conversion(data: bytes, kind: str) -> bool:
    """Whether ``data`` is a legacy binary file of ``kind`` for LibreOffice (not one named so that holds
    another format, nor an encrypted one: their parsers name those)."""
    from quarry.ingest.parsers.encrypted import is_encrypted

    return kind in CONVERTED and data.startswith(OLE_MAGIC) and not is_encrypted(data)


def convert_many(items: list[tuple[str, bytes, str]], limit: int) -> dict[str, bytes]:
    """``{key: converted bytes}`` for ``(key, data, kind)`` items, one LibreOffice call per target
    format, all of it within ``limit`` seconds. What it could not convert is left out; after a
    timeout nothing is kept (a file may have been cut off mid-write)."""
    program = soffice()
    if program is None or not items:
        return {}
    out: dict[str, bytes] = {}
    for target in sorted({_TARGET[kind] for _, _, kind in items}):
        group = [(key, data, kind) for key, data, kind in items if _TARGET[kind] == target]
        with tempfile.TemporaryDirectory(prefix="quarry-convert-") as tmp:
            srcs = []
            for n, (_key, data, kind) in enumerate(group):
                srcs.append(Path(tmp) / "in" / f"{n}.{kind}")
                srcs[-1].parent.mkdir(exist_ok=True)
                srcs[-1].write_bytes(data)
            try:
                done = _run(program, target, srcs, Path(tmp), limit)
            except ParseError:
                continue
            if done.returncode in (124, 137, -9):
                continue
            for n, (key, _data, _kind) in enumerate(group):
                result = Path(tmp) / "out" / f"{n}.{target}"
                if result.is_file() and result.stat().st_size:
                    out[key] = result.read_bytes()
    return out


def _run(program: str, target: str, srcs: list[Path], tmp: Path, limit: int) -> subprocess.CompletedProcess:
    cmd = [
        program,
        "--headless",
        "--norestore",
        "--nologo",
        "--nodefault",
        "--nolockcheck",
        f"-env:UserInstallation={(tmp / 'profile').as_uri()}",
        "--convert-to",
        target,
        "--outdir",
        str(tmp / "out"),
        *map(str, srcs),
    ]
    # GNU timeout signals the whole process group it starts (soffice runs soffice.bin below it),
    # and outlives a parse worker that is killed for the per-file timeout.
    killer = shutil.which("timeout")
    if killer:
        cmd = [killer, "-s", "KILL", str(limit), *cmd]
    try:
        return subprocess.run(
            cmd, capture_output=True, timeout=limit + 10, stdin=subprocess.DEVNULL, env={**os.environ, "HOME": str(tmp)}
        )
    except subprocess.TimeoutExpired as exc:
        raise ParseError(f"LibreOffice took longer than {limit} s to convert the file") from exc
    except OSError as exc:
        raise ParseError(f"cannot run LibreOffice ({program}): {exc.strerror or exc}") from exc


def convert(data: bytes, kind: str, target: str) -> bytes:
    """``data`` (a ``kind`` file) converted by LibreOffice to ``target`` ("docx", "pptx", ...)."""
    program = soffice()
    if program is None:
        raise ParseError(f"{_WHAT.get(kind, kind)} needs LibreOffice, which is not installed: {INSTALL_HINT}")
    limit = _timeout()
    with tempfile.TemporaryDirectory(prefix="quarry-convert-") as tmp:
        src = Path(tmp) / f"document.{kind}"
        src.write_bytes(data)
        out = Path(tmp) / "out"
        done = _run(program, target, [src], Path(tmp), limit)
        result = out / f"document.{target}"
        if not result.is_file() or result.stat().st_size == 0:
            if done.returncode in (124, 137, -9):
                raise ParseError(f"LibreOffice took longer than {limit} s to convert the file")
            said = [
                line
                for line in (done.stderr or b"").decode("utf-8", "replace").splitlines()
                if line.strip() and "javaldx" not in line
            ]
            reason = said[-1].strip() if said else f"exit status {done.returncode}"
            raise ParseError(f"LibreOffice could not convert this {_WHAT.get(kind, kind)} file: {reason}")
        return result.read_bytes()


def target_of(kind: str) -> str:
    """The format LibreOffice converts a ``kind`` file to ("docx" for "doc")."""
    return _TARGET[kind]


def _timeout() -> int:
    """The per-file parse timeout of the run's settings (``QUARRY_PARSE_TIMEOUT``)."""
    from quarry.core.settings import Settings

    return Settings.from_env().parse_timeout
