"""OCR: images, and PDF pages whose text layer is empty or garbage.

Engine: ``rapidocr-onnxruntime`` (PP-OCRv4 detection + recognition as ONNX models shipped
inside the wheel, run by onnxruntime, which quarry already uses: no download at run time, no
torch). Tesseract is used instead when ``QUARRY_OCR_ENGINE=tesseract`` and the ``tesseract``
binary is on PATH. PDF pages are rendered with pypdfium2 at 200 dpi: at 150 dpi the
recogniser drops most word spaces on a typical scanned page; 200 dpi keeps them.

Measured by ``bench/ocr.py`` on this project's 2-CPU machine (shared, load average 9): CER
2.4% on a real scanned page against a hand transcription (0.0% ignoring whitespace), 3.8-7.5%
on rendered real pages; 13-65 s a page, almost all of it recognition; screenshots 3-5 s.
Two-column pages are read column by column (:func:`_lines`). README "Formats" has the table.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from quarry.core.environment import environment
from quarry.core.errors import ParseError
from quarry.core.models import ParsedDocument

DPI = 200
MAX_IMAGE_PIXELS = 60_000_000  # a decompression bomb is refused, not OCRed
_engine = None
Box = tuple[float, float, float, float, str]  # an OCRed text box: x0, x1, y0, y1, its text


@dataclass
class OcrStats:
    pages: int = 0
    seconds: float = 0.0
    numbers: list[int] = field(default_factory=list)  # 1-based pages whose text came from OCR
    warnings: list[str] = field(default_factory=list)


def engine_name() -> str:
    """The OCR engine this process would use: "rapidocr", "tesseract" or "" when none is installed."""
    wanted = environment().ocr_engine.strip().lower()
    if wanted == "tesseract" and shutil.which("tesseract"):
        return "tesseract"
    try:
        import rapidocr_onnxruntime  # noqa: F401
    except ImportError:
        return "tesseract" if shutil.which("tesseract") else ""
    return "rapidocr"


def _rapidocr():
    global _engine
    if _engine is None:
        from rapidocr_onnxruntime import RapidOCR

        # No angle classifier: scans are upright far more often than not, and it costs time.
        _engine = RapidOCR(use_cls=False)
    return _engine


def ocr_image(image) -> str:
    """The text of a PIL image, lines in reading order (top to bottom, left to right)."""
    name = engine_name()
    if not name:
        raise ParseError("OCR needs rapidocr-onnxruntime (pip install -e .) or tesseract")
    image = image.convert("RGB")
    if name == "tesseract":
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        done = subprocess.run(["tesseract", "stdin", "stdout"], input=buf.getvalue(), capture_output=True, check=False)
        return done.stdout.decode("utf-8", "replace").strip()
    import numpy as np

    result, _ = _rapidocr()(np.asarray(image), use_cls=False)
    return _lines(result or [])


def _lines(result) -> str:
    """Join rapidocr's boxes into text in reading order, columns one after the other.

    Boxes whose vertical centres are close share a line. A two-column page would read across
    both columns that way, so a gutter is looked for first: a vertical strip near the middle
    that no box crosses. Where there is one, the boxes between two full-width boxes (titles,
    figures' captions) are read left column first, then right.
    """
    boxes: list[Box] = []
    for box, text, _score in result:
        xs, ys = [p[0] for p in box], [p[1] for p in box]
        boxes.append((min(xs), max(xs), min(ys), max(ys), text))
    if not boxes:
        return ""
    gutter = _gutter(boxes)
    if gutter is None:
        return _join_lines(boxes)
    blocks: list[list[Box]] = []
    band: list[Box] = []
    out: list[str] = []
    for box in sorted(boxes, key=lambda b: b[2]):
        if box[0] < gutter < box[1]:  # crosses the gutter: full width, ends the band above it
            blocks.append(band)
            blocks.append([box])
            band = []
        else:
            band.append(box)
    blocks.append(band)
    for block in blocks:
        left = [b for b in block if b[1] <= gutter]
        right = [b for b in block if b[0] >= gutter]
        rest = [b for b in block if b[0] < gutter < b[1]]
        for part in (rest, left, right):
            if part:
                out.append(_join_lines(part))
    return "\n".join(out)


def _gutter(boxes) -> float | None:
    """The x of an empty vertical strip in the middle third that most boxes stay clear of, or None."""
    x0, x1 = min(b[0] for b in boxes), max(b[1] for b in boxes)
    width = x1 - x0
    if width <= 0 or len(boxes) < 6:
        return None
    best, best_cross = None, len(boxes)
    for step in range(1, 30):
        x = x0 + width * (1 / 3 + step / 90)
        cross = sum(1 for b in boxes if b[0] < x < b[1])
        left = sum(1 for b in boxes if b[1] <= x)
        right = sum(1 for b in boxes if b[0] >= x)
        if cross < best_cross and min(left, right) >= 3:
            best, best_cross = x, cross
    # A real gutter is crossed by few boxes (titles, full-width figures), not by body lines, and
    # is wider than the gap between two boxes of one line (a word space, a table cell's padding).
    if best is None or best_cross > 0.15 * len(boxes):
        return None
    heights = sorted(b[3] - b[2] for b in boxes)
    # Robust edges: a centred short line (an e-mail address under a title) may sit near the gutter.
    left_edges = sorted(b[1] for b in boxes if b[1] <= best)
    right_edges = sorted(b[0] for b in boxes if b[0] >= best)
    gap = right_edges[len(right_edges) // 10] - left_edges[-(len(left_edges) // 10) - 1]
    return best if gap >= heights[len(heights) // 2] else None


def _join_lines(boxes) -> str:
    rows = sorted(((b[2] + b[3]) / 2, b[3] - b[2], b[0], b[4]) for b in boxes)
    lines: list[list[tuple]] = []
    for box in rows:
        if lines and abs(box[0] - lines[-1][0][0]) < 0.5 * max(box[1], 1):
            lines[-1].append(box)
        else:
            lines.append([box])
    return "\n".join(" ".join(b[3] for b in sorted(line, key=lambda b: b[2])) for line in lines)


def parse_image(data: bytes, kind: str = "image", ocr: bool = True) -> ParsedDocument:
    """OCR an image; each frame of a multi-page TIFF is a page. Without ``ocr`` an image is an error."""
    if not ocr:
        raise ParseError("image needs OCR, which is off (--no-ocr)")
    from PIL import Image, ImageSequence

    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    _register_heif()
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as exc:
        raise ParseError(f"not a readable image: {type(exc).__name__}: {str(exc)[:120]}") from exc
    stats = OcrStats()
    pages = []
    for frame in ImageSequence.Iterator(image):
        t = time.perf_counter()
        pages.append(ocr_image(frame.copy()))
        stats.pages += 1
        stats.seconds += time.perf_counter() - t
    doc = ParsedDocument.from_pages(pages)
    if not doc.text:
        return ParsedDocument(text="", ocr_pages=stats.pages, ocr_seconds=stats.seconds)
    doc.ocr_pages, doc.ocr_seconds = stats.pages, stats.seconds
    doc.ocr_page_numbers = [i + 1 for i, text in enumerate(pages) if text.strip()]
    blank = [i + 1 for i, text in enumerate(pages) if not text.strip()]
    if blank:
        doc.warnings.append(f"OCR read no text on {_pages(blank)}")
    return doc


def _pages(numbers: list[int]) -> str:
    """``page 3`` or ``pages 2, 5, 7`` (the first 20, then how many more)."""
    shown = ", ".join(map(str, numbers[:20])) + (f" and {len(numbers) - 20} more" if len(numbers) > 20 else "")
    return f"page{'s' if len(numbers) > 1 else ''} {shown}"


def _register_heif() -> None:
    try:
        from pillow_heif import register_heif_opener
    except ImportError:
        return  # HEIC then fails as "not a readable image"
    register_heif_opener()


_WORDISH = re.compile(r"[^\W_]{2,}")


def is_garbage(text: str) -> bool:
    """True when a page's text layer is empty or not text (glyph ids, replacement characters)."""
    stripped = "".join(text.split())
    if len(stripped) < 3:
        return True
    if stripped.count("\ufffd") > 0.1 * len(stripped) or text.count("(cid:") > 5:
        return True
    # Words of two or more letters/digits must make up a fair share of the characters.
    return sum(len(m) for m in _WORDISH.findall(text)) < 0.3 * len(stripped)


def ocr_pdf_pages(data: bytes, pages: list[int], stats: OcrStats) -> dict[int, str]:
    """OCR the 0-based ``pages`` of a PDF that carry an image; pages without one are blank, not scans."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    from quarry.ingest.parsers.pdf_layout import PDFIUM

    out: dict[int, str] = {}
    with PDFIUM:
        pdf = pdfium.PdfDocument(data)
    try:
        for i in pages:
            t = time.perf_counter()
            with PDFIUM:  # pdfium renders; the OCR of the image runs without holding it
                page = pdf[i]
                if not any(True for _ in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=3)):
                    continue
                image = page.render(scale=DPI / 72).to_pil()
                page.close()
            out[i] = ocr_image(image)
            stats.pages += 1
            stats.seconds += time.perf_counter() - t
    finally:
        with PDFIUM:
            pdf.close()
    return out
