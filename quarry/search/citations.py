"""Checking a model's answer against the passages it was given.

The answer (prose with ``[n]`` markers, or the claims of a structured answer) is cut into
sentences, each with the passage numbers it cites. A number that was not given is dropped from the
text and reported; a sentence left without a citation is reported as uncited; a quote (in double
quotes in prose, ``quote`` in a claim) must be found, whitespace, case and typographic quotes
aside, in a passage the sentence cites. The kept citations are renumbered in order of first use,
so the text reads [1], [2], ... whatever numbers the model used.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from quarry.search.evidence import Passage
from quarry.search.highlight import query_terms, term_spans
from quarry.search.prompting import NOT_FOUND

__all__ = ["Citation", "Checked", "check", "parse_content", "MARKER"]

MARKER = re.compile(r"\[\s*(\d{1,4}(?:\s*[,;]\s*\d{1,4})*)\s*\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_QUOTED = re.compile(r"[\"“]([^\"“”]{12,}?)[\"”]")
_TRAILING_PUNCT = re.compile(r"([.!?]+)$")
_FOLD = str.maketrans({"“": "", "”": "", '"': "", "‘": "'", "’": "'", "–": "-", "—": "-"})  # quotes never count
EXCERPT = 400  # characters of a cited passage shown when the model quoted nothing


@dataclass
class Citation:
    """A kept citation: ``number`` in the checked text, ``passage`` the number the model was given."""

    number: int
    passage: int
    doc_id: str
    path: str
    title: str
    page_start: int | None
    page_end: int | None
    chunk_ids: list[str]
    chunk_id: str  # the chunk the quote (or the excerpt) is in
    quote: str  # the verified quote, else the sentence of the passage closest to the claim
    quote_verified: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Checked:
    """What :func:`check` found."""

    text: str
    sentences: list[dict] = field(default_factory=list)  # {"text", "citations": [numbers], "uncited": bool}
    citations: list[Citation] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)  # {"number", "sentence"}: cited, never given
    uncited: list[str] = field(default_factory=list)  # sentences without a citation
    quotes: list[dict] = field(default_factory=list)  # {"quote", "passages", "found"}
    not_found: bool = False  # the model said the passages do not answer the question


def _fold(text: str) -> str:
    return " ".join(text.translate(_FOLD).lower().split())


def parse_content(content: str) -> tuple[list[dict], bool]:
    """``(claims, not_found)`` from a model's answer: claims ``{"text", "citations", "quote"}``.

    Takes a structured answer (``{"status", "claims"}``, or ``{"answer", "citations"}``) or prose
    with ``[n]`` markers.
    """
    from quarry.ingest.llm.client import parse_json

    stripped = content.strip()
    if stripped.strip(".").upper() == NOT_FOUND:
        return [], True
    data = None
    if stripped.startswith(("{", "```")):
        try:
            data = parse_json(stripped)
        except ValueError:
            data = None
    if isinstance(data, dict):
        if str(data.get("status", "")).lower() == "not_found":
            return [], True  # whatever claim the schema made it write
        claims = data.get("claims")
        if isinstance(claims, list) and claims:
            out = []
            for c in claims:
                if not isinstance(c, dict):
                    continue
                text = str(c.get("text", "")).strip()
                cites = [
                    int(n) for n in c.get("citations") or [] if isinstance(n, (int, float, str)) and str(n).isdigit()
                ]
                cites += [int(n) for m in MARKER.finditer(text) for n in re.split(r"[,;]", m.group(1))]
                quote = c.get("quote")
                out.append(
                    {
                        "text": MARKER.sub("", text).strip(),
                        "citations": list(dict.fromkeys(cites)),
                        "quote": quote.strip() if isinstance(quote, str) else "",
                    }
                )
            return [c for c in out if c["text"]], False
        if isinstance(data.get("answer"), str):
            claims = _prose(data["answer"])
            top = [int(n) for n in data.get("citations") or [] if str(n).isdigit()]
            if top and not any(c["citations"] for c in claims):
                for c in claims:
                    c["citations"] = list(top)
            return claims, not claims
    if NOT_FOUND in stripped and len(stripped) < 3 * len(NOT_FOUND):
        return [], True
    return _prose(stripped), False


def _prose(text: str) -> list[dict]:
    """Sentences of prose with the numbers of their ``[n]`` markers (markers after a sentence's
    full stop belong to that sentence)."""
    pieces = [p for p in _SENTENCE_END.split(" ".join(text.split())) if p.strip()]
    merged: list[str] = []
    for piece in pieces:
        lead = re.match(r"^((?:\s*\[[\d,;\s]+\])+)\s*(.*)$", piece)
        if lead and merged:
            merged[-1] += " " + lead.group(1).strip()
            piece = lead.group(2)
        if piece.strip():
            merged.append(piece.strip())
    out = []
    for sentence in merged:
        cites = [int(n) for m in MARKER.finditer(sentence) for n in re.split(r"[,;]", m.group(1))]
        body = " ".join(MARKER.sub("", sentence).split())
        body = re.sub(r"\s+([.!?,;:])", r"\1", body)
        quotes = [q.strip() for q in _QUOTED.findall(body)]
        if body:
            out.append({"text": body, "citations": list(dict.fromkeys(cites)), "quote": quotes[0] if quotes else ""})
    return out


def _excerpt(passage: Passage, claim: str) -> tuple[str, int]:
    """The sentence of ``passage`` sharing most terms with ``claim``, and its offset."""
    terms = query_terms(claim)
    best, best_at, best_score = passage.text[:EXCERPT], 0, -1
    at = 0
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", passage.text):
        start = passage.text.find(sentence, at)
        at = max(at, start)
        score = len(term_spans(sentence, terms)) if terms else 0
        if sentence.strip() and score > best_score:
            best, best_at, best_score = sentence.strip()[:EXCERPT], max(0, start), score
    return best, best_at


def _find_quote(quote: str, passage: Passage) -> int:
    """Where ``quote`` is in ``passage`` (folded), or -1."""
    folded, text = _fold(quote).strip(" .,;:"), _fold(passage.text)
    if len(folded) < 3:
        return -1
    at = text.find(folded)
    if at < 0:
        return -1
    # the offset in the folded text approximates the original's (whitespace runs collapse)
    return min(at, max(0, len(passage.text) - 1))


def check(content: str, passages: list[Passage]) -> Checked:
    """Check a model's answer ``content`` against the ``passages`` it was given."""
    claims, not_found = parse_content(content)
    if not_found:
        return Checked(text="", not_found=True)
    given = {p.number: p for p in passages}
    renumber: dict[int, int] = {}
    out = Checked(text="")
    first_use: dict[int, dict] = {}  # passage number -> the claim that first cited it
    parts = []
    for claim in claims:
        kept = []
        for n in claim["citations"]:
            if n not in given:
                out.dropped.append({"number": n, "sentence": claim["text"]})
                continue
            if n not in renumber:
                renumber[n] = len(renumber) + 1
                first_use[n] = claim
            if renumber[n] not in kept:
                kept.append(renumber[n])
        quote = claim.get("quote") or ""
        if quote:
            cited = [n for n in claim["citations"] if n in given]
            found = any(_find_quote(quote, given[n]) >= 0 for n in cited)
            out.quotes.append({"quote": quote, "passages": [renumber[n] for n in cited], "found": found})
        uncited = not kept
        if uncited:
            out.uncited.append(claim["text"])
        out.sentences.append({"text": claim["text"], "citations": kept, "uncited": uncited})
        marks = "".join(f"[{n}]" for n in kept)
        body = claim["text"]
        if marks:
            end = _TRAILING_PUNCT.search(body)
            body = f"{body[: end.start()]} {marks}{end.group(1)}" if end else f"{body} {marks}"
        parts.append(body)
    out.text = " ".join(parts)
    for n, new in sorted(renumber.items(), key=lambda item: item[1]):
        p, claim = given[n], first_use[n]
        quote, verified, at = "", False, -1
        for q in out.quotes:
            if q["found"] and new in q["passages"]:
                at = _find_quote(q["quote"], p)
                if at >= 0:
                    quote, verified = q["quote"], True
                    break
        if not verified:
            quote, at = _excerpt(p, claim["text"])
        out.citations.append(
            Citation(
                number=new,
                passage=n,
                doc_id=p.doc_id,
                path=p.path,
                title=p.title,
                page_start=p.page_start,
                page_end=p.page_end,
                chunk_ids=list(p.chunk_ids),
                chunk_id=p.chunk_at(at) if p.chunk_offsets else (p.chunk_ids[0] if p.chunk_ids else ""),
                quote=quote,
                quote_verified=verified,
            )
        )
    return out


def describe(checked: Checked) -> dict:
    """The counts of a check, for logs and benchmarks."""
    return {
        "kept": len(checked.citations),
        "dropped": len(checked.dropped),
        "uncited": len(checked.uncited),
        "quotes": len(checked.quotes),
        "quotes_found": sum(1 for q in checked.quotes if q["found"]),
    }
