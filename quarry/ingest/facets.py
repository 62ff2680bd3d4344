"""Facets a document states about itself in its opening text, whatever its format: a filing's
type, period, fiscal year and company (the cover of an SEC 10-K or 10-Q, as a PDF, an HTML page,
a Word file or plain text).

They land in ``documents.metadata`` (filterable: ``--where "metadata.fiscal_year = 'FY2018'"``),
the title line of every chunk header takes the type and period
(:func:`quarry.ingest.context.with_period`), and the document's card, which names the document
to the search (:mod:`quarry.retrieval.cards`), takes all four. :func:`stated_facets` is applied
to every parsed document (:func:`quarry.ingest.parsers.parse_data`); what a parser set itself wins.
"""

from __future__ import annotations

import re

__all__ = ["stated_facets", "filing_context", "registrant", "FILING_CHARS"]

FILING_CHARS = 8000  # the opening text read for a filing's type and period


def stated_facets(text: str) -> dict[str, str]:
    """The facets ``text``'s opening states (``{}`` for most documents)."""
    return filing_context(text[:FILING_CHARS])


_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_DATE = rf"({_MONTH}\.?\s+\d{{1,2}}\s*,?\s*(\d{{4}}))"  # "December 31 , 2020" too
_PERIODS = (
    (re.compile(rf"for\s+the\s+(?:fiscal\s+)?year\s+ended\s+{_DATE}", re.I), "fiscal year {year} (ended {date})"),
    (re.compile(rf"for\s+the\s+quarterly\s+period\s+ended\s+{_DATE}", re.I), "quarter ended {date}"),
)
_TYPES = (
    (re.compile(r"\bform\s+10-?k\b", re.I), "Form 10-K annual report"),
    (re.compile(r"\bform\s+10-?q\b", re.I), "Form 10-Q quarterly report"),
    (re.compile(r"\bform\s+8-?k\b", re.I), "Form 8-K current report"),
    (re.compile(r"\bform\s+20-?f\b", re.I), "Form 20-F annual report"),
)


# The cover of an SEC filing names the company on the line above this caption.
_REGISTRANT = re.compile(r"\(\s*exact\s+name\s+of\s+(?:the\s+)?registrant", re.I)
_COVER_NOISE = re.compile(r"^.*?(?:commission\s+file\s+(?:number|no\.?)\s*:?\s*[\d-]+|[_.]{3,})\s*", re.I)


def filing_context(opening: str) -> dict[str, str]:
    """``doc_type``, ``period``, ``fiscal_year`` (``FY2018``) and ``company`` of a filing, where its
    opening text states them (the cover page of a 10-K or 10-Q does: the company is the
    registrant's name above the "(Exact name of registrant as specified in its charter)"
    caption); ``{}`` for anything else. The header's title line takes the type and period
    (:func:`quarry.ingest.context.with_period`); the document's card, which names it to the
    search (:mod:`quarry.retrieval.cards`), takes all four."""
    text = " ".join(opening.split())
    out = {}
    kind = min(((m.start(), label) for rx, label in _TYPES if (m := rx.search(text))), default=None)
    if kind:
        out["doc_type"] = kind[1]
    for rx, form in _PERIODS:
        m = rx.search(text)
        if m:
            date = re.sub(r"\s+,", ",", " ".join(m.group(1).replace(".", "").split()))
            month, rest = date.split(" ", 1)
            date = f"{month.capitalize()} {rest}"
            out["period"] = form.format(year=m.group(2), date=date)
            if form.startswith("fiscal year"):
                out["fiscal_year"] = f"FY{m.group(2)}"  # as questions write it
            break
    company = registrant(opening)
    if company and kind:
        out["company"] = company
    return out


def registrant(opening: str) -> str:
    """The registrant's name on a filing's cover: the text just before the "(Exact name of
    registrant ...)" caption, on its own line or ahead of the caption on the same one; "" when
    the caption is absent or what precedes it does not look like a name."""
    m = _REGISTRANT.search(opening)
    if not m:
        return ""
    before = opening[:m.start()].replace("\u00a0", " ").rstrip()
    lines = [ln.strip() for ln in before.splitlines() if ln.strip()]
    name = _COVER_NOISE.sub("", lines[-1]).strip(" ,;:") if lines else ""
    if (not (2 <= len(name) <= 80) or not re.search(r"[A-Za-z]", name) or re.search(r"\d{3}", name)
            or any(rx.search(name) for rx, _ in _TYPES)):
        return ""
    return name
