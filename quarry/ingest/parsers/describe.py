"""``quarry formats``: each format, the library or program that reads it, and what is missing here."""

from __future__ import annotations

from quarry.core.registry import FORMATS

__all__ = ["describe_formats", "formats_markdown"]


def describe_formats() -> list[dict]:
    """Each format with its extensions, library, kept structure, and the imports and programs it
    lacks here (for ``quarry formats``)."""
    import importlib.util
    import shutil

    from quarry.ingest.parsers.legacy import INSTALL_HINT, soffice
    from quarry.ingest.parsers.ocr import engine_name

    rows = []
    for f in FORMATS.values():
        missing = [m for m in f.requires if importlib.util.find_spec(m) is None]
        install = ["pip install -e . (the Python packages quarry depends on)"] if missing else []
        programs = {p: soffice() if p == "soffice" else shutil.which(p) for p in f.binaries}
        for program, where in programs.items():
            if where is None:
                missing.append(program)
                install.append(INSTALL_HINT if program == "soffice" else f"install {program}")
        if f.ocr and not engine_name():
            missing.append("rapidocr_onnxruntime or tesseract")
            install.append("pip install rapidocr-onnxruntime, or install tesseract")
        rows.append(
            {
                "type": f.name,
                "extensions": list(f.extensions),
                "library": f.library,
                "programs": programs,
                "structure": f.structure,
                "missing": missing,
                "readable": not missing,
                "install": "; ".join(install),
                "plugin": FORMATS.origin(f.name),
            }
        )
    return rows


def formats_markdown() -> str:
    """The table of docs/formats.md, from :data:`FORMATS` (``tests/test_docs_formats.py`` keeps them equal)."""
    lines = ["| type | extensions | read by | structure kept |", "|---|---|---|---|"]
    for f in FORMATS.values():
        if FORMATS.origin(f.name) is not None:  # a plugin's: not part of quarry's own docs
            continue
        library = f.library + (f" (needs the program `{'`, `'.join(f.binaries)}`)" if f.binaries else "")
        lines.append(f"| {f.name} | {' '.join(f'`{e}`' for e in f.extensions)} | {library} | {f.structure} |")
    return "\n".join(lines)
