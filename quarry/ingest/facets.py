"""Facets a document states about itself in its opening text, whatever its format: a filing's
type, period, fiscal year and company (the cover of an SEC 10-K or 10-Q, as a PDF, an HTML page,
a Word file or plain text), and the other names it gives itself (``aliases``: ticker symbols,
short names it defines for itself, an abbreviation in parentheses after its name).

They land in ``documents.metadata`` (filterable: ``--where "metadata.fiscal_year = 'FY2018'"``),
the title line of every chunk header takes the type and period
(:func:`quarry.ingest.context.with_period`), and the document's card, which names the document
to the search (:mod:`quarry.retrieval.cards`), takes all four and the aliases, so that a question
naming the short form ("JNJ", "MMM", "WHO") finds the document that writes its name in full. :func:`stated_facets` is applied
to every parsed document (:func:`quarry.ingest.parsers.parse_data`); what a parser set itself wins.
"""

from __future__ import annotations

import re

__all__ = ["stated_facets", "filing_context", "registrant", "aliases", "FILING_CHARS", "ALIAS_CHARS"]

FILING_CHARS = 8000  # the opening text read for a filing's type and period
ALIAS_CHARS = 20000  # ... and for the names a document gives itself (a 10-K defines them in Item 1)
MAX_ALIASES = 8


def stated_facets(text: str, title: str | None = None) -> dict[str, str]:
    """The facets ``text``'s opening states (``{}`` for most documents); ``title`` is the name the
    document's metadata gives it, one of the names whose aliases are looked for."""
    out = filing_context(text[:FILING_CHARS])
    names = [n for n in (out.get("company"), title) if n]
    found = aliases(text[:ALIAS_CHARS], names)
    if found:
        out["aliases"] = ", ".join(found)
    return out


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
    before = opening[: m.start()].replace("\u00a0", " ").rstrip()
    lines = [ln.strip() for ln in before.splitlines() if ln.strip()]
    name = _COVER_NOISE.sub("", lines[-1]).strip(" ,;:") if lines else ""
    if (
        not (2 <= len(name) <= 80)
        or not re.search(r"[A-Za-z]", name)
        or re.search(r"\d{3}", name)
        or any(rx.search(name) for rx, _ in _TYPES)
    ):
        return ""
    return name


_EXCHANGE = (
    r"(?:The\s+)?(?:New\s+York\s+Stock\s+Exchange|NYSE(?:\s+American)?|Nasdaq|NASDAQ|Chicago\s+Stock\s+Exchange)"
)
_TICKERS = (
    # the cover's table: "Common Stock, Par Value $1.00 JNJ New York Stock Exchange"
    re.compile(rf"\b([A-Z][A-Z.]{{0,5}})\s+{_EXCHANGE}\b"),
    # "(NYSE: MGM)", "Nasdaq: ADBE"
    re.compile(r"\b(?:NYSE|Nasdaq|NASDAQ)\s*:\s*([A-Z][A-Z.]{0,5})\b"),
    # "The Company's ticker symbol is MMM", "trades under the symbol “AXP”"
    re.compile(
        r"(?i:\b(?:ticker|trading)\s+symbols?\s+(?:is|of)|\bunder\s+the\s+(?:ticker\s+)?symbols?)\s+"
        r"[“\"']?([A-Z][A-Z.]{0,5})\b"
    ),
)
_QUOTED = re.compile(r"[“\"]([^”\"]{1,40})[”\"]")
# "the term “3M” or “Company” includes 3M Company": names defined for the document's subject
_TERMS = re.compile(
    r"\bthe\s+terms?\s+((?:[“\"][^”\"]{1,40}[”\"][\s,]*(?:or|and)?\s*(?:the\s+)?)+)"
    r"(?:includes?|refers?|means?|as\s+used)",
    re.I,
)
# Names too common to tell one document from another ("the Company" is every filing).
_GENERIC = frozenset(
    "company corporation registrant we us our the company the corporation the registrant issuer "
    "group the group firm the firm nyse nasdaq llc inc plc ltd sec act".split(" ")
)
_GENERIC_PHRASES = frozenset({"the company", "the corporation", "the registrant", "the group", "the firm"})


def aliases(opening: str, names: list[str]) -> list[str]:
    """The other names a document gives itself in ``opening``: ticker symbols (the cover's
    "Trading Symbol" table, "(NYSE: MGM)", "ticker symbol is MMM"), terms defined for it ("the
    term “3M” or “Company” includes 3M Company") and the quoted short names or the abbreviation in
    parentheses right after one of its ``names`` ("Johnson & Johnson (“J&J”)", "World Health
    Organization (WHO)"). Names that fit every document ("the Company") and the ``names``
    themselves are left out; at most :data:`MAX_ALIASES`, in the order found."""
    text = opening.replace("\u00a0", " ")
    found: list[str] = []
    for rx in _TICKERS:
        found += [m.group(1).rstrip(".") for m in rx.finditer(text)]
    for m in _TERMS.finditer(text):
        found += _QUOTED.findall(m.group(1))
    for name in names:
        words = [re.escape(w) for w in name.split()]
        if not words:
            continue
        for m in re.finditer(r"\s+".join(words) + r"\s*,?\s*\(([^()]{1,160})\)", text, re.I):
            inside = m.group(1)
            quoted = _QUOTED.findall(inside)
            if quoted:
                found += quoted
            elif re.fullmatch(r"[A-Z][A-Za-z&.\-]{1,9}", inside.strip()) and _initials_fit(inside.strip(), name):
                found.append(inside.strip())
    own = {" ".join(n.lower().split()) for n in names}
    out: list[str] = []
    seen: set[str] = set()
    for alias in found:
        alias = " ".join(alias.split()).strip(" ,;:")
        key = alias.lower()
        if (
            len(alias) < 2
            or key in seen
            or key in own
            or key in _GENERIC
            or key in _GENERIC_PHRASES
            or not re.search(r"[A-Za-z]", alias)
            or len(alias.split()) > 5
        ):
            continue
        seen.add(key)
        out.append(alias)
    return out[:MAX_ALIASES]


def _initials_fit(abbreviation: str, name: str) -> bool:
    """Whether ``abbreviation``'s letters begin words of ``name`` in order ("WHO" for "World Health
    Organization"), so that "(the Fund)" or "(2019)" is no abbreviation of it."""
    letters = [ch.lower() for ch in abbreviation if ch.isalpha()]
    initials = [w[0].lower() for w in re.findall(r"[A-Za-z][A-Za-z'’]*", name)]
    i = 0
    for ch in letters:
        while i < len(initials) and initials[i] != ch:
            i += 1
        if i == len(initials):
            return False
        i += 1
    return bool(letters) and letters[0] == initials[0]
