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

A file named ``.doc``/``.ppt`` that is really something else (an OOXML package, RTF, HTML) was
already sent to its own parser by its content (``parsers.parse_bytes``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from quarry.core.errors import ParseError

_TARGET = {"doc": "docx", "ppt": "pptx", "xls": "xlsx"}
_WHAT = {"doc": "legacy Word", "ppt": "legacy PowerPoint", "xls": "legacy Excel"}
INSTALL_HINT = "install LibreOffice (Debian: apt install libreoffice-writer-nogui libreoffice-impress-nogui)"


def soffice() -> str | None:
    """The LibreOffice program: ``$QUARRY_SOFFICE`` when set, else ``soffice`` or ``libreoffice`` on the PATH."""
    configured = os.environ.get("QUARRY_SOFFICE")
    if configured:
        return configured if os.path.isfile(configured) and os.access(configured, os.X_OK) else None
    return shutil.which("soffice") or shutil.which("libreoffice")


def parse_legacy(data: bytes, kind: str):
    """Parse a DOC or PPT: convert it with LibreOffice, then read the result as DOCX or PPTX."""
    from quarry.ingest.parsers import parse_bytes

    target = _TARGET[kind]
    return parse_bytes(convert(data, kind, target), target)


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
        cmd = [program, "--headless", "--norestore", "--nologo", "--nodefault", "--nolockcheck",
               f"-env:UserInstallation={(Path(tmp) / 'profile').as_uri()}",
               "--convert-to", target, "--outdir", str(out), str(src)]
        # GNU timeout signals the whole process group it starts (soffice runs soffice.bin below it),
        # and outlives a parse worker that is killed for the per-file timeout.
        killer = shutil.which("timeout")
        if killer:
            cmd = [killer, "-s", "KILL", str(limit), *cmd]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=limit + 10, stdin=subprocess.DEVNULL,
                                  env={**os.environ, "HOME": tmp})
        except subprocess.TimeoutExpired as exc:
            raise ParseError(f"LibreOffice took longer than {limit} s to convert the file") from exc
        except OSError as exc:
            raise ParseError(f"cannot run LibreOffice ({program}): {exc.strerror or exc}") from exc
        result = out / f"document.{target}"
        if not result.is_file() or result.stat().st_size == 0:
            if done.returncode in (124, 137, -9):
                raise ParseError(f"LibreOffice took longer than {limit} s to convert the file")
            said = [line for line in (done.stderr or b"").decode("utf-8", "replace").splitlines()
                    if line.strip() and "javaldx" not in line]
            reason = said[-1].strip() if said else f"exit status {done.returncode}"
            raise ParseError(f"LibreOffice could not convert this {_WHAT.get(kind, kind)} file: {reason}")
        return result.read_bytes()


def _timeout() -> int:
    try:
        return max(1, int(float(os.environ.get("QUARRY_PARSE_TIMEOUT", "120"))))
    except ValueError:
        return 120
