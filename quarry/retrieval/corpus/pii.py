"""Personal data and secrets in a text: where they are, how many of each kind, the text masked.

Kinds (:data:`KINDS`): ``email``, ``phone`` (international ``+CC ...`` or North American
``(555) 010-0199`` / ``555-010-0199`` numbers), ``card`` (13-19 digits passing the Luhn check),
``iban`` (country, check digits, passing ISO 13616's mod-97 check), ``national_id`` (US SSN
``123-45-6789`` outside the never-issued ranges, UK National Insurance numbers) and ``secret``
(credentials: private key blocks, AWS access key ids, GitHub, Slack, Stripe and Google API
tokens, JWTs, and a long value assigned to a name like ``api_key`` / ``password`` / ``token``).

The credential rules are detect-secrets' (its AWS, private key, GitHub, Slack, Stripe, JWT and
keyword plugins) written as the few regexes they are. detect-secrets itself (1.5.0) works offline
but scans files line by line through a global settings object and plugin registry, and pulls in
``requests`` and ``pyyaml``; its entropy plugins, the part worth a library, flag hashes and ids
that are no secret (every ``sha256`` and ``text_hash`` in a store), so they are not used.

Nothing here logs or returns a detected value except :func:`find`'s offsets, which callers use
to mask (:func:`redact`), never to store.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["KINDS", "find", "counts", "redact", "parse_kinds"]

KINDS = ("email", "phone", "card", "iban", "national_id", "secret")

_SECRET = re.compile(
    "|".join(
        [
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[0-9A-Z]{16}\b",
            r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b",
            r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
            r"\b[rs]k_live_[A-Za-z0-9]{16,}\b",
            r"\bAIza[0-9A-Za-z_-]{35}\b",
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            r"\b(?i:api[_-]?key|secret(?:[_-]?key)?|access[_-]?token|auth[_-]?token|password|passwd|pwd)\b['\"]?\s*[:=]\s*"
            r"['\"]?(?=[A-Za-z0-9/+_.-]*\d)[A-Za-z0-9/+_.-]{12,}",
        ]
    )
)
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_CARD = re.compile(r"(?<![\w./:=+-])\d(?:[ -]?\d){12,18}(?![\w/-]|[.,]\d)")
_NATIONAL = re.compile(
    r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"
    r"|\b(?![DFIQUV])[A-CEGHJ-PR-TW-Z](?![DFIOQUV])[A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"
)
_PHONE = re.compile(
    r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\d-])"
    r"|(?<![\w-])\(\d{3}\) ?\d{3}[-. ]\d{4}(?![\d-])"
    r"|(?<![\w.-])\d{3}[-.]\d{3}[-.]\d{4}(?![\w-]|\.\d)"
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban_ok(value: str) -> bool:
    s = value.replace(" ", "")
    if not 15 <= len(s) <= 34:
        return False
    moved = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _card_ok(value: str) -> bool:
    digits = re.sub(r"\D", "", value)
    return 13 <= len(digits) <= 19 and digits[0] in "3456" and len(set(digits)) > 1 and _luhn(digits)


def _phone_ok(value: str) -> bool:
    return 8 <= len(re.sub(r"\D", "", value)) <= 15


_RULES = (
    ("secret", _SECRET, None),
    ("email", _EMAIL, None),
    ("iban", _IBAN, _iban_ok),
    ("card", _CARD, _card_ok),
    ("national_id", _NATIONAL, None),
    ("phone", _PHONE, _phone_ok),
)
_DIGITS = re.compile(r"\d\d")
# Every secret rule needs one of these in the text (the keyword rule: a keyword, then ':' or '='):
# a text with none skips the secret pattern, the costliest of the rules on prose.
_SECRET_HINTS = (
    "PRIVATE KEY",
    "AKIA",
    "ASIA",
    "AGPA",
    "AIDA",
    "AROA",
    "ANPA",
    "ANVA",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
    "k_live_",
    "AIza",
    "eyJ",
)
_SECRET_KEYWORD = re.compile(r"(?i:key|secret|token|passwd|password|pwd)['\"]?\s*[:=]")


def _may_hold_secret(text: str) -> bool:
    return any(h in text for h in _SECRET_HINTS) or _SECRET_KEYWORD.search(text) is not None


_NEEDS_DIGITS = {"iban", "card", "national_id", "phone"}  # a text without two digits in a row holds none: skipped


def find(text: str, kinds: Iterable[str] = KINDS) -> list[tuple[str, int, int]]:
    """``(kind, start, end)`` of each detected value, in text order, none overlapping (earlier
    rules win: a key inside a URL is a secret, not a phone number)."""
    taken: list[tuple[int, int]] = []
    out = []
    digits = _DIGITS.search(text) is not None
    for kind, pattern, check in _RULES:
        if (
            kind not in kinds
            or (kind in _NEEDS_DIGITS and not digits)
            or (kind == "email" and "@" not in text)
            or (kind == "secret" and not _may_hold_secret(text))
        ):
            continue
        for m in pattern.finditer(text):
            a, b = m.span()
            if check is not None and not check(m.group()):
                continue
            if any(a < e and s < b for s, e in taken):
                continue
            taken.append((a, b))
            out.append((kind, a, b))
    return sorted(out, key=lambda x: x[1])


def counts(text: str) -> dict[str, int]:
    """How many values of each kind (every kind present, 0 when none)."""
    out = dict.fromkeys(KINDS, 0)
    for kind, _, _ in find(text):
        out[kind] += 1
    return out


def redact(text: str, kinds: Iterable[str] = KINDS) -> str:
    """The text with each detected value of ``kinds`` replaced by ``[KIND]`` (``[EMAIL]``)."""
    parts, at = [], 0
    for kind, a, b in find(text, kinds):
        parts += [text[at:a], f"[{kind.upper()}]"]
        at = b
    parts.append(text[at:])
    return "".join(parts)


def parse_kinds(spec: str | None) -> tuple[str, ...]:
    """``all`` or a comma list of :data:`KINDS` (``email,card``) as a tuple; '' / None: none."""
    if not spec:
        return ()
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if names == ["all"]:
        return KINDS
    bad = [n for n in names if n not in KINDS]
    if bad:
        raise ValueError(f"unknown PII kind {bad[0]!r} in --redact; choose all or of {', '.join(KINDS)}")
    return tuple(names)
