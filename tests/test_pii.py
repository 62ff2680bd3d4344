"""Personal data and secrets: real-looking values of every kind are found, look-alikes (order
numbers, dates, versions, ids) are not; counts reach the catalog, values reach nothing; the
redacted export holds no detected value."""

from __future__ import annotations

import json
import logging

import pytest

import quarry
from quarry.retrieval.corpus import pii

FOUND = [
    ("email", "Write to jane.doe@example.org today"),
    ("email", "cc: ops-team+alerts@mail.example.co.uk"),
    ("phone", "call +44 20 7946 0958 now"),
    ("phone", "call +1-202-555-0173"),
    ("phone", "office (555) 010-0199"),
    ("phone", "fax 555-010-0199."),
    ("card", "Card 4111 1111 1111 1111 was used"),
    ("card", "paid with 5555-5555-5555-4444"),
    ("card", "amex 378282246310005"),
    ("iban", "IBAN GB82 WEST 1234 5698 7654 32"),
    ("iban", "DE89370400440532013000"),
    ("national_id", "SSN 123-45-6789 on file"),
    ("national_id", "NI number AB 12 34 56 C"),
    ("secret", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE"),
    ("secret", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----"),
    ("secret", "token ghp_0123456789abcdefghijABCDEFGHIJ012345"),
    ("secret", 'api_key: "a8f9s7d6f5g4h3j2k1"'),
    ("secret", "xoxb-1234567890-abcdefghijkl"),
    ("secret", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
]
NOT_FOUND = [
    "Order 2024-118-5521 shipped on 2024-03-01.",
    "Invoice 4111111111111112 (fails Luhn) and 1234 5678 9012 3456.",
    "Released 2024-03-01T12:00:00Z, version 1.2.3.4, build 20240301.1",
    "Room 123-456 on floor 7; ticket JIRA-12345; ISBN 978-3-16-148410-0",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "GB82 WEST 1234 5698 7654 33 (bad check digits)",
    "SSN-like 000-12-3456 and 666-12-3456 are never issued",
    "the password field is required; a token is issued at login",
    "user@localhost has no domain; version 10.0.0.1",
]


@pytest.mark.parametrize("kind, text", FOUND)
def test_real_looking_values_are_found(kind, text):
    assert [k for k, _, _ in pii.find(text)] == [kind]
    assert f"[{kind.upper()}]" in pii.redact(text)


@pytest.mark.parametrize("text", NOT_FOUND)
def test_look_alikes_are_not(text):
    assert pii.find(text) == []
    assert pii.redact(text) == text


def test_redact_only_the_kinds_asked():
    text = "jane.doe@example.org, +44 20 7946 0958"
    assert pii.redact(text, ("email",)) == "[EMAIL], +44 20 7946 0958"
    assert pii.parse_kinds("all") == pii.KINDS and pii.parse_kinds("email, card") == ("email", "card")
    with pytest.raises(ValueError, match="unknown PII kind 'ssn'"):
        pii.parse_kinds("email,ssn")


VALUES = [
    "jane.doe@example.org",
    "4111 1111 1111 1111",
    "+44 20 7946 0958",
    "GB82 WEST 1234 5698 7654 32",
    "AKIAIOSFODNN7EXAMPLE",
]


def test_counts_reach_the_catalog_and_values_reach_nothing(tmp_path, run_flow, caplog):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "contacts.md").write_text(
        "# Contacts\n\nWrite to jane.doe@example.org or call +44 20 7946 0958. Card 4111 1111 1111 1111 was\n"
        "used for the deposit; IBAN GB82 WEST 1234 5698 7654 32. Order 2024-118-5521 shipped on 2024-03-01.\n"
        "The deploy key is AKIAIOSFODNN7EXAMPLE.\n"
    )
    (tree / "plain.md").write_text("# Plain\n\nNothing personal here, order 2024-118-5521 of 2024-03-01.\n")
    with caplog.at_level(logging.DEBUG):
        run_flow([tree], tmp_path / "db")
    with quarry.open(tmp_path / "db") as index:
        rows = index.sql(
            "SELECT d.rel_path, sum(pii_email), sum(pii_phone), sum(pii_card), sum(pii_iban), "
            "sum(pii_secret), sum(c.pii_total), any_value(d.pii_total) FROM chunks c "
            "JOIN documents d USING (doc_id) GROUP BY 1 ORDER BY 1"
        ).rows
        assert [tuple(int(v) for v in r[1:]) for r in rows] == [(1, 1, 1, 1, 1, 5, 5), (0, 0, 0, 0, 0, 0, 0)]
        index.export(tmp_path / "corpus.jsonl", "jsonl", redact="all")
        index.export(tmp_path / "clean.jsonl", "jsonl", filters="pii_total = 0")
        index.export(tmp_path / "folder", "jsonl", redact=("email", "card", "phone", "iban", "secret"))
    out = (tmp_path / "corpus.jsonl").read_text()
    assert "[EMAIL]" in out and "[CARD]" in out and "2024-118-5521" in out
    clean = [json.loads(line) for line in (tmp_path / "clean.jsonl").read_text().splitlines()]
    assert [r["path"].rsplit("/", 1)[1] for r in clean] == ["plain.md"]
    for value in VALUES:
        assert value not in out
        assert value not in (tmp_path / "folder" / "chunks.jsonl").read_text()
        assert value not in caplog.text
