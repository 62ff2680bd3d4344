"""Password-protected Office and OpenDocument files, named as such before a parser trips on them.

An encrypted DOCX/XLSX/PPTX is not a zip at all but an OLE container holding ``EncryptionInfo``
and ``EncryptedPackage`` streams (what Office writes with a password to open), so a zip reader
calls it corrupt; an encrypted ODF file is a zip whose ``META-INF/manifest.xml`` carries
``encryption-data``; a legacy DOC/XLS/PPT flags encryption in its own stream headers, which
msoffcrypto-tool reads. Each is the failure "encrypted (password required)", as for a PDF.
"""

from __future__ import annotations

import io
import zipfile

from quarry.core.errors import ParseError

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ENCRYPTED = "encrypted (password required)"


def check_encrypted(data: bytes, kind: str) -> None:
    """ParseError("encrypted (password required)") when ``data`` (of file type ``kind``) is encrypted."""
    if is_encrypted(data):
        raise ParseError(ENCRYPTED)


def is_encrypted(data: bytes) -> bool:
    """Whether ``data`` is an encrypted OOXML package, ODF package or legacy Office file."""
    if data.startswith(OLE_MAGIC):
        return _ole_encrypted(data)
    if data.startswith(b"PK\x03\x04"):
        return _odf_encrypted(data)
    return False


def _ole_encrypted(data: bytes) -> bool:
    try:
        import olefile

        with olefile.OleFileIO(io.BytesIO(data)) as ole:
            streams = {"/".join(s) for s in ole.listdir()}
    except Exception:  # noqa: BLE001 - not readable as OLE: its format's parser names what is wrong
        return False
    if "EncryptedPackage" in streams or "EncryptionInfo" in streams:
        return True
    if not streams & {"WordDocument", "Workbook", "Book", "PowerPoint Document"}:
        return False
    try:
        import msoffcrypto

        return bool(msoffcrypto.OfficeFile(io.BytesIO(data)).is_encrypted())
    except Exception:  # noqa: BLE001 - a damaged or unusual file: let its parser say why
        return False


def _odf_encrypted(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            if "META-INF/manifest.xml" not in zf.namelist():
                return False
            info = zf.getinfo("META-INF/manifest.xml")
            if info.file_size > (4 << 20):
                return False
            manifest = zf.read(info)
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError, EOFError):
        return False
    return b"encryption-data" in manifest
